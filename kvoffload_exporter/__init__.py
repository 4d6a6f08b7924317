"""kvoffload-exporter: is vLLM's KV-cache offloading paying off? Evidence from metrics and canaries."""

__version__ = "0.1.0"
