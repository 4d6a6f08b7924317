"""kvoffload-exporter: is vLLM's KV-cache offloading paying off? Evidence from metrics and canaries."""

__version__ = "0.1.0"

PROJECT_URL = "https://github.com/kvoffload-exporter/kvoffload-exporter"
"""The project's home, where the committed runbook is published (bundle.settings.RUNBOOK_URL)."""
