"""KV caches of one engine: chained block hashes, the GPU prefix cache and the CPU offload tier.

Hashes chain like vLLM's: block i's hash covers block i−1's hash and its own token ids, and the
request's `cache_salt` goes into block 0 only, so every block of a salted prompt differs. Offload
chunks are keyed by the hash of their last GPU block, as the OffloadingConnector does.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

BlockHash = bytes


def block_hashes(tokens: Sequence[int], block_size: int, salt: str | None = None) -> list[BlockHash]:
    """Hashes of the full blocks of `tokens` (a trailing partial block has none)."""
    out: list[BlockHash] = []
    parent = b""
    for i in range(len(tokens) // block_size):
        h = hashlib.blake2b(parent, digest_size=16)
        h.update(array("q", tokens[i * block_size : (i + 1) * block_size]).tobytes())
        if i == 0 and salt:
            h.update(b"\x00salt\x00" + salt.encode())
        parent = h.digest()
        out.append(parent)
    return out


def chunk_hashes(hashes: Sequence[BlockHash], blocks_per_chunk: int) -> list[BlockHash]:
    """Offload chunk keys: the hash of every chunk's last GPU block (full chunks only)."""
    return [hashes[i - 1] for i in range(blocks_per_chunk, len(hashes) + 1, blocks_per_chunk)]


@dataclass
class Lease:
    """GPU blocks a running request holds: cached (hashed) ones plus uncached partial/decode blocks."""

    hashed: list[BlockHash] = field(default_factory=list)
    uncached: int = 0


class GpuPrefixCache:
    """vLLM's prefix cache: blocks in use are pinned; freed blocks stay reusable until evicted, LRU.

    Freed blocks enter the free queue tail-first, so a prompt's tail is evicted before its head.
    """

    def __init__(self, num_blocks: int):
        self.capacity = num_blocks
        self._free: OrderedDict[BlockHash, None] = OrderedDict()  # refcount 0, LRU first
        self._pinned: dict[BlockHash, int] = {}
        self._uncached = 0

    def __len__(self) -> int:
        return len(self._free) + len(self._pinned)

    def match(self, hashes: Sequence[BlockHash]) -> int:
        """Number of leading blocks already cached."""
        n = 0
        for h in hashes:
            if h not in self._free and h not in self._pinned:
                break
            n += 1
        return n

    def _pin(self, h: BlockHash) -> None:
        self._free.pop(h, None)
        self._pinned[h] = self._pinned.get(h, 0) + 1

    def _make_room(self, blocks: int) -> bool:
        while len(self) + self._uncached + blocks > self.capacity:
            if not self._free:
                return False
            self._free.popitem(last=False)
        return True

    def allocate(self, hit: Sequence[BlockHash], new: Sequence[BlockHash], uncached: int) -> Lease:
        """Pin the hit blocks, cache the new full blocks, hold `uncached` more for tail and decode.

        Blocks that do not fit (everything pinned) are computed but not cached."""
        lease = Lease()
        for h in list(hit) + list(new):
            if h in self._pinned or h in self._free or self._make_room(1):
                self._pin(h)
                lease.hashed.append(h)
        lease.uncached = uncached if self._make_room(uncached) else 0
        self._uncached += lease.uncached
        return lease

    def release(self, lease: Lease) -> None:
        for h in reversed(lease.hashed):  # tail first: the head becomes most recently used
            left = self._pinned.get(h, 0) - 1
            if left > 0:
                self._pinned[h] = left
            elif h in self._pinned:
                del self._pinned[h]
                self._free[h] = None
        self._uncached -= lease.uncached
        lease.hashed, lease.uncached = [], 0

    def usage(self) -> float:
        """vllm:kv_cache_usage_perc: blocks held by running requests (0 at rest)."""
        return (len(self._pinned) + self._uncached) / self.capacity if self.capacity else 0.0

    def clear(self) -> None:
        self._free.clear()
        self._pinned.clear()
        self._uncached = 0


@dataclass(frozen=True)
class StoreResult:
    new_chunks: int  # chunks written (bytes moved)
    failed: bool = False  # prepare_store found no room (kv_offload_allocation_failure)


class CpuTier:
    """The OffloadingConnector's CPU tier: fixed number of chunks, LRU eviction.

    `forgetful` models a tier whose lookups never match its stores (fault `store-without-load`):
    lookups miss and every store writes again."""

    def __init__(self, num_chunks: int):
        self.capacity = num_chunks
        self._chunks: OrderedDict[BlockHash, None] = OrderedDict()
        self.forgetful = False

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, h: object) -> bool:
        return not self.forgetful and h in self._chunks

    def touch(self, hashes: Iterable[BlockHash]) -> None:
        for h in reversed(list(hashes)):  # like vLLM's LRU touch: the first chunk ends up newest
            if h in self:
                self._chunks.move_to_end(h)

    def lookup(self, hashes: Sequence[BlockHash]) -> int:
        """Number of leading chunks present."""
        n = 0
        for h in hashes:
            if h not in self:
                break
            n += 1
        return n

    def store(self, hashes: Sequence[BlockHash]) -> StoreResult:
        new = [h for h in hashes if h not in self]
        if not new:
            return StoreResult(0)
        if len(new) > self.capacity:
            return StoreResult(0, failed=True)
        for h in new:
            self._chunks.pop(h, None)
        while len(self._chunks) + len(new) > self.capacity:
            self._chunks.popitem(last=False)
        for h in new:
            self._chunks[h] = None
        return StoreResult(len(new))

    def clear(self) -> None:
        self._chunks.clear()
