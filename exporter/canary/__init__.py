"""Closed-loop KV-offload canary: seed a salted prefix, displace it from the GPU, revisit it, compare
TTFT against controls, and decide whether the offload tier pays off (docs/canary.md).

Pure: `plan` (sizes, prompts, salts), `classify` (probe → result), `stats` (quantiles, bootstrap,
verdict), `budget`, `config`, `protocol`, `expose`, `report`, `png`. Async without aiohttp: `engine`.
The only aiohttp module is `client`; `plugin` wires engines into `serve`.
"""
