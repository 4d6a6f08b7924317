"""Closed-loop KV-offload canary: seed a salted prefix, displace it from the GPU, revisit it, compare
TTFT against controls, and decide whether the offload tier pays off. A plugin: it reaches the running exporter
only through `kvoffload_exporter.server.plugins`. Its modules are in the module map of docs/design.md.
"""
