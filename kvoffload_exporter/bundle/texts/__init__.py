"""Generated documents: the runbook, docs/alerts.md, docs/metrics.md and the README's generated blocks."""
