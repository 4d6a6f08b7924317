"""Built-in vLLM simulator: engine model, version exposition profiles, time model, faults, traffic.
I/O only in `server` and `sender`; the module map is in docs/design.md.
"""
