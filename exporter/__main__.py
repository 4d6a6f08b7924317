"""`python -m exporter` runs the CLI."""

from exporter.cli import main

raise SystemExit(main())
