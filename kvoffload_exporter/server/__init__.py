"""server: see docs/design.md."""
