"""derive: see docs/design.md."""
