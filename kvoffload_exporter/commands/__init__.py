"""Sub-commands: each module defines `register(subparsers)` (and optional `ORDER`) and sets `func`."""
