"""config: see docs/design.md."""
