"""Built-in vLLM simulator: engine model, version exposition profiles, time model, faults, traffic.

Pure modules (no I/O): `calibration`, `timing`, `cache`, `stats`, `engine`, `versions`, `family`,
`families` (the exposition table), `profiles` (its writer),
`faults`, `protocol`, `traffic`, `simulator`. The aiohttp server is `server`, the traffic
sender `sender`.
"""
