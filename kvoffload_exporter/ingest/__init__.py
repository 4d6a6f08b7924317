"""ingest: see docs/design.md."""
