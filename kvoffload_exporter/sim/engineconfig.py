"""One engine's setup (`EngineConfig`): model, cache shape and the CPU tier, from a calibration or flags.

Its own module so that the engine's model stays under the size limit; `kvoffload_exporter.sim.engine` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvoffload_exporter.sim.calibration import Calibration

PAGE_SIZE = 4096


@dataclass(frozen=True)
class EngineConfig:
    model_name: str
    kv_bytes_per_token: int
    block_size: int = 16
    num_gpu_blocks: int = 640
    max_model_len: int = 8192
    connector: bool = True
    offload_block_size: int = 64  # tokens per CPU-tier chunk (the connector's `block_size`)
    cpu_bytes: int = 8_000_000_000  # `cpu_bytes_to_use`
    gpu_memory_utilization: float = 0.5
    store_report_delay_s: float = 1.0  # ≤ 0: stores are reported only by the next engine step

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.offload_block_size % self.block_size:
            raise ValueError(
                f"offload block size {self.offload_block_size} must be a multiple of the "
                f"GPU block size {self.block_size}"
            )
        if self.num_gpu_blocks <= 0 or self.max_model_len <= 0 or self.kv_bytes_per_token <= 0:
            raise ValueError("GPU blocks, max_model_len and KV bytes per token must be positive")

    @property
    def blocks_per_chunk(self) -> int:
        return self.offload_block_size // self.block_size

    @property
    def chunk_bytes(self) -> int:
        return self.offload_block_size * self.kv_bytes_per_token

    @property
    def num_cpu_chunks(self) -> int:
        padded = -(-self.chunk_bytes // PAGE_SIZE) * PAGE_SIZE
        return self.cpu_bytes // padded

    @classmethod
    def from_calibration(cls, cal: Calibration, **overrides: Any) -> EngineConfig:
        base = cls(
            model_name=cal.shape.name,
            kv_bytes_per_token=cal.shape.kv_bytes_per_token,
            block_size=cal.block_size,
            num_gpu_blocks=cal.num_gpu_blocks,
            max_model_len=cal.max_model_len,
            offload_block_size=cal.offload_block_size,
            cpu_bytes=cal.cpu_bytes,
            gpu_memory_utilization=cal.gpu_memory_utilization,
        )
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})


__all__ = ["PAGE_SIZE", "EngineConfig"]
