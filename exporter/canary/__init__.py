"""Closed-loop KV-offload canary: seed a salted prefix, displace it from the GPU, revisit it, compare
TTFT against controls, and decide whether the offload tier pays off (docs/canary.md has the module map).

Pure: `plan` (sizes, prompts, salts), `classify` (probe → result), `stats` (quantiles, bootstrap,
verdict), `budget`, `config`, `protocol` (the SSE parser), `records`, `state`, `expose`, `report`,
`checkreport`, `png`, `evidence` (writes the bundle). Async without aiohttp: `engine`, `preflight`, `prepared`, `steps`,
the strategies `pressure` and `wait` (the `Cycle` protocol), `schedule`, `checkrun`. The only aiohttp
module is `client`; `plugin` wires engines into `serve`.
"""
