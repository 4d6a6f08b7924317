"""`python -m kvoffload_exporter` runs the CLI."""

from kvoffload_exporter.cli import main

raise SystemExit(main())
