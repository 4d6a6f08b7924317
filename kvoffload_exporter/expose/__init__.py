"""expose: see docs/design.md."""
