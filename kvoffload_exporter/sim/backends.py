"""Simulated offload backends other than the native OffloadingConnector, as exposition rewrites.

Why a rewrite and not a second engine model: the engine already decides what is stored, loaded and hit;
a backend changes only how that is *reported* (families, units, labels). `reshape` turns the native
body into SimpleCPU (blocks, no kv_offload_* family), tiering (CPU primary + a slow `1:fs` secondary
that sheds half of its cascade writes under backpressure), LMCache in-process (`lmcache:*` tokens,
no `engine` label), the Mooncake store (puts and gets by key; with `errors`, every put answered with
an error, its bytes under `status="error"` as vLLM counts them), UMBP (stores and loads to a pool by
`operation`; with `errors`, every store fails) or HiSparse (no offload tier: sparse-attention pages per
decoded token, so the engine runs without the OffloadingConnector). Family names, labels and units follow
tests/fixtures/reconstructed/*. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvoffload_exporter.ingest.backends import Backend
from kvoffload_exporter.sim.family import EngineView

OFFLOAD_BACKENDS: tuple[Backend, ...] = (
    Backend.NATIVE,
    Backend.SIMPLECPU,
    Backend.TIERING,
    Backend.LMCACHE,
    Backend.MOONCAKE_STORE,
    Backend.UMBP,
)
"""The exporter's backends the simulator can report, by the exporter's own names (ingest.backends.Backend:
the `backend` label of kvoffload_backend_info), so `--backend X` is read back as backend X."""
HISPARSE = "hisparse"
"""Not an offload backend (the exporter reports none for it): HiSparse's sparse-attention pages on an
engine without the OffloadingConnector, read as `not_configured` plus the kvoffload_hisparse_* series."""
BACKENDS: tuple[str, ...] = (*OFFLOAD_BACKENDS, HISPARSE)
"""What `--backend` (and `SimOptions.backend`) takes: every offload backend by its exporter name, and HiSparse."""
BACKEND_HELP: Mapping[str, str] = {
    Backend.NATIVE: "the OffloadingConnector, the default",
    Backend.SIMPLECPU: "blocks",
    Backend.TIERING: "CPU + a slow fs tier that sheds writes",
    Backend.LMCACHE: "lmcache:* tokens",
    Backend.MOONCAKE_STORE: "puts and gets by key; the store-errors fault fails every put",
    Backend.UMBP: "stores and loads to a pool; store-errors fails every store",
    HISPARSE: "no offload tier: sparse-attention pages per decoded token, read on TPOT",
}
"""One line per `--backend` value for the flag's help (a value without one fails the parser's build)."""
FORMER_NAMES: Mapping[str, Backend] = {"mooncake-store": Backend.MOONCAKE_STORE}
"""Spellings `--backend` took before it used the exporter's names: still accepted, hidden from --help,
with one deprecation line."""


@dataclass(frozen=True)
class Shaping:
    """The faults a backend's rewrite shows (sim/faults.py) and the vLLM version it writes for."""

    errors: bool = False  # store-errors: every put answered with an error
    promotion_failures: bool = False  # tiering: the fs tier finds the chunks, every promotion fails
    load_errors: bool = False  # Mooncake store: the keys are found, every get fails
    shed: float = 0.5  # tiering: share of cascade writes the slow fs tier drops (backpressure)
    version: tuple[int, int] = (0, 26)


NO_CONNECTOR = frozenset({HISPARSE})
"""Backends that are no offload tier: the simulated engine runs without the OffloadingConnector."""
_OFFLOAD = ("vllm:kv_offload_", "vllm_kv_offload_")
FS = "1:fs"


def _drop_offload(text: str) -> list[str]:
    """The native body without any vllm:kv_offload_* line (SimpleCPU and LMCache register none)."""
    out = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") and len(line.split(" ", 3)) > 2 else line
        if not name.startswith(_OFFLOAD):
            out.append(line)
    return out


def _family(out: list[str], name: str, kind: str, text: str, samples: Sequence[tuple[str, float]]) -> None:
    out.append(f"# HELP {name} {text}")
    out.append(f"# TYPE {name} {kind}")
    out.extend(f"{name}{{{labels}}} {value!r}" for labels, value in samples)


def _lb(e: EngineView, extra: str = "") -> str:
    base = f'engine="{e.index}",model_name="{e.cfg.model_name}"'
    return f"{base},{extra}" if extra else base


def _simplecpu(out: list[str], engines: Sequence[EngineView]) -> None:
    per_block = {e.index: e.cfg.kv_bytes_per_token * e.cfg.block_size for e in engines}

    def blocks(e: EngineView, fam: str) -> float:
        return float(int(e.stats.counter(fam) // per_block[e.index]))

    _family(
        out,
        "vllm:simple_kv_offload_save_outcomes_total",
        "counter",
        "Store admission decisions in SimpleCPUOffloadConnector, by outcome.",
        [(_lb(e, 'outcome="stored"'), blocks(e, "kv_offload_store_bytes")) for e in engines],
    )
    loads = [(_lb(e), blocks(e, "kv_offload_load_bytes")) for e in engines if e.stats.counter("kv_offload_load_bytes")]
    _family(out, "vllm:simple_kv_offload_load_blocks_total", "counter", "KV blocks restored to GPU.", loads)
    _family(
        out,
        "vllm:simple_kv_offload_pending_store_blocks",
        "gauge",
        "Offload blocks in pending stores.",
        [(_lb(e), 0.0) for e in engines],
    )
    cap = [(_lb(e, f'capacity_blocks="{e.cfg.cpu_bytes // per_block[e.index]}"'), 1.0) for e in engines]
    _family(out, "vllm:simple_kv_offload_info", "gauge", "SimpleCPUOffloadConnector configuration.", cap)


def _tiering(text: str, engines: Sequence[EngineView], how: Shaping) -> list[str]:
    out = text.splitlines()
    chunk = {e.index: e.cfg.chunk_bytes for e in engines}
    written = [(e, e.stats.counter("kv_offload_store_bytes")) for e in engines]
    cascaded = [(_lb(e, f'tier="{FS}"'), float(int(v * (1 - how.shed)))) for e, v in written if v]
    _family(out, "vllm:kv_offload_tiering_write_bytes_total", "counter", "Bytes written to a tier.", cascaded)
    shed = [(e, v * how.shed) for e, v in written if v]
    blk = [(_lb(e, f'tier="{FS}"'), float(int(v // (e.cfg.kv_bytes_per_token * e.cfg.block_size)))) for e, v in shed]
    _family(
        out,
        "vllm:kv_offload_tiering_backpressure_blocks_dropped_total",
        "counter",
        "Blocks dropped by tier backpressure (a slow tier shedding writes).",
        blk,
    )
    jobs = [(_lb(e, f'tier="{FS}"'), float(int(v // max(1, chunk[e.index] * 16)) + 1)) for e, v in shed]
    _family(
        out,
        "vllm:kv_offload_tiering_backpressure_stores_dropped_total",
        "counter",
        "Store jobs dropped by tier backpressure.",
        jobs,
    )
    _family(
        out,
        "vllm:kv_offload_tiering_active_cascade_jobs",
        "gauge",
        "Active cascade jobs.",
        [(_lb(e, f'tier="{FS}"'), 0.0) for e in engines],
    )
    _promotions(out, engines, how)
    return out


def _promotions(out: list[str], engines: Sequence[EngineView], how: Shaping) -> None:
    """The fs tier's lookups, hits and failed promotions (vLLM 0.34.0 tiering/spec.py:184-209) and, from 0.34,
    the deferred release gauge (spec.py:250-259). With `promotion_failures` the engine's tier forgets what it
    stored (no load), while the fs tier reports finding every chunk asked for and failing to promote it."""
    chunks = {
        e.index: float(int(e.stats.counter("external_prefix_cache_queries") // max(1, e.cfg.offload_block_size)))
        for e in engines
    }
    hits = [(_lb(e, f'tier="{FS}"'), chunks[e.index] if how.promotion_failures else 0.0) for e in engines]
    _family(
        out,
        "vllm:kv_offload_tiering_chunk_queries_total",
        "counter",
        "Chunk lookup queries to a tier.",
        [(_lb(e, f'tier="{FS}"'), chunks[e.index]) for e in engines],
    )
    _family(out, "vllm:kv_offload_tiering_chunk_hits_total", "counter", "Chunk lookup hits in a tier.", hits)
    failed = [(lb, float(int(v // 16) + (1 if v else 0))) for lb, v in hits]  # jobs of up to 16 chunks
    _family(out, "vllm:kv_offload_tiering_promotion_job_failures_total", "counter", "Failed promotion jobs.", failed)
    if how.version >= (0, 34):
        _family(
            out,
            "vllm:kv_offload_tiering_deferred_release_chunks",
            "gauge",
            "Primary-tier chunks of failed promotions whose release is deferred.",
            [(_lb(e, f'tier="{FS}"'), 0.0) for e in engines],
        )


def _lmcache(out: list[str], engines: Sequence[EngineView]) -> None:
    def lb(e: EngineView, role: str) -> str:
        m = e.cfg.model_name
        return f'model_name="{m}",role="{role}",served_model_name="{m}",worker_id="{e.index}"'

    def tokens(e: EngineView, fam: str) -> float:
        return float(int(e.stats.counter(fam) // e.cfg.kv_bytes_per_token))

    rows = (
        ("lmcache:num_stored_tokens_total", "worker", "kv_offload_store_bytes", "Stored tokens."),
        ("lmcache:num_hit_tokens_total", "worker", "kv_offload_load_bytes", "Tokens retrieved from LMCache."),
    )
    for name, role, fam, help_text in rows:
        _family(out, name, "counter", help_text, [(lb(e, role), tokens(e, fam)) for e in engines])
    lookups = [(lb(e, "scheduler"), e.stats.counter("external_prefix_cache_queries")) for e in engines]
    _family(out, "lmcache:num_lookup_tokens_total", "counter", "Tokens looked up.", lookups)
    hits = [(lb(e, "scheduler"), e.stats.counter("external_prefix_cache_hits")) for e in engines]
    _family(out, "lmcache:num_lookup_hits_total", "counter", "Tokens hit on lookup.", hits)


_MOONCAKE = "vllm:mooncake_store_operation"
_BY_SOURCE = "prompt_tokens_cached_by_source_total{"


def _host_as_external(out: list[str]) -> list[str]:
    """A store outside vLLM supplies its hits as `external_unspecified`, not `host` (the CPU tier's)."""
    host: dict[str, float] = {}
    for line in out:
        if _BY_SOURCE in line and not line.startswith("#") and 'source="host"' in line:
            series, _, value = line.rpartition(" ")
            host[series.replace('source="host"', 'source="external_unspecified"')] = float(value)
    moved = []
    for line in out:
        series, _, value = line.rpartition(" ")
        if series in host:
            line = f"{series} {float(value) + host[series]!r}"
        elif 'source="host"' in series and series.replace('source="host"', 'source="external_unspecified"') in host:
            line = f"{series} 0.0"
        moved.append(line)
    return moved


def _mooncake_store(out: list[str], engines: Sequence[EngineView], errors: bool, load_errors: bool = False) -> None:
    """One put per stored chunk, one get per loaded chunk, keys = blocks; an existence check before each
    put. Children appear with their first operation, as vLLM creates them. With `load_errors` every get
    fails (status="error", its keys failed: vLLM 0.34.0 store/worker.py:1450-1480), nothing is loaded."""
    calls: list[tuple[str, float]] = []
    keys: list[tuple[str, float]] = []
    size: list[tuple[str, float]] = []
    failed: list[tuple[str, float]] = []
    for e in engines:
        block = e.cfg.kv_bytes_per_token * e.cfg.block_size
        chunk = max(1, e.cfg.chunk_bytes)
        put, get = e.stats.counter("kv_offload_store_bytes"), e.stats.counter("kv_offload_load_bytes")
        status = "error" if errors else "ok"
        got = "error" if load_errors else "ok"
        for op, st, nbytes in (("save_exists", "ok", put), ("save_put", status, put), ("load_get", got, get)):
            if not nbytes or (errors and op == "load_get"):
                continue
            lb = _lb(e, f'operation="{op}",status="{st}"')
            calls.append((lb, float(-(-nbytes // chunk))))
            keys.append((lb, float(int(nbytes // block))))
            if op != "save_exists" and not (op == "load_get" and st == "error"):  # a failed get moved nothing
                size.append((lb, float(nbytes)))
            if st == "error":
                failed.append((lb, float(int(nbytes // block))))
    _family(out, _MOONCAKE + "_total", "counter", "Mooncake store operations by operation and status.", calls)
    _family(out, _MOONCAKE + "_keys_total", "counter", "Keys in Mooncake store operations.", keys)
    _family(out, _MOONCAKE + "_bytes_total", "counter", "Bytes in Mooncake store operations.", size)
    _family(out, _MOONCAKE + "_failed_keys_total", "counter", "Keys whose Mooncake store operation failed.", failed)


def _umbp(out: list[str], engines: Sequence[EngineView], errors: bool) -> None:
    """One object per block; bytes count completed ranges only, so a failing store moves none."""
    names = ("submitted", "completed", "failed", "bytes")
    rows: dict[str, list[tuple[str, float]]] = {n: [] for n in names}
    for e in engines:
        block = e.cfg.kv_bytes_per_token * e.cfg.block_size
        for op, fam in (("store", "kv_offload_store_bytes"), ("load", "kv_offload_load_bytes")):
            nbytes = e.stats.counter(fam)
            if not nbytes or (errors and op == "load"):
                continue
            objects, failing = float(int(nbytes // block)), errors and op == "store"
            values = (objects, 0.0 if failing else objects, objects if failing else 0.0, 0.0 if failing else nbytes)
            for n, v in zip(names, values, strict=True):
                rows[n].append((_lb(e, f'operation="{op}"'), float(v)))
    for n in names:
        _family(out, f"vllm:umbp_transfer_{n}_total", "counter", f"UMBP objects {n}.", rows[n])


HISPARSE_PAGES = (1800, 248)  # hot-buffer hits and misses per decoded token
HISPARSE_PAGE_BYTES = 36864


def _hisparse(out: list[str], engines: Sequence[EngineView]) -> None:
    """Pages found in the GPU hot buffer or fetched from the host, per decoded token."""
    tokens = {e.index: e.stats.counter("generation_tokens") for e in engines}
    hits, misses = HISPARSE_PAGES
    rows = (
        ("hisparse_cache_hits_total", "counter", "HiSparse device hot-buffer hits.", hits),
        ("hisparse_cache_misses_total", "counter", "HiSparse device hot-buffer misses.", misses),
        ("hisparse_host_to_device_bytes_total", "counter", "Bytes from host to HiSparse hot buffers.", misses),
    )
    for name, kind, text, per in rows:
        scale = HISPARSE_PAGE_BYTES if "bytes" in name else 1
        _family(out, "vllm:" + name, kind, text, [(_lb(e), float(tokens[e.index] * per * scale)) for e in engines])
    usage = [(_lb(e), 0.31 if tokens[e.index] else 0.0) for e in engines]
    _family(out, "vllm:hisparse_host_cache_usage_perc", "gauge", "HiSparse host KV-cache usage.", usage)


def corrupted_requests(engines: Sequence[EngineView], fraction: float) -> str:
    """`vllm:corrupted_requests` as vLLM registers it with VLLM_COMPUTE_NANS_IN_LOGITS=1 (v1/metrics/loggers.py:
    629-640): this fraction of each engine's finished requests had NaNs in their logits."""
    out: list[str] = []
    rows = [(_lb(e), float(int(e.stats.counter("request_success", ("length",)) * fraction))) for e in engines]
    _family(
        out,
        "vllm:corrupted_requests_total",
        "counter",
        "Corrupted requests, in terms of total number of requests with NaNs in logits.",
        rows,
    )
    return "\n".join(out) + "\n"


def reshape(text: str, backend: str, engines: Sequence[EngineView], how: Shaping | None = None) -> str:
    """The native body as `backend` would expose the same engine activity, with the faults `how` shows."""
    how = how or Shaping()
    if backend == HISPARSE:
        out = text.splitlines()
        _hisparse(out, engines)
        return "\n".join(out) + "\n"
    live = [e for e in engines if e.connector]
    if backend == Backend.NATIVE or not live:
        return text
    if backend == Backend.TIERING:
        return "\n".join(_tiering(text, live, how)) + "\n"
    out = _drop_offload(text)
    if backend == Backend.SIMPLECPU:
        _simplecpu(out, live)
    elif backend == Backend.LMCACHE:
        _lmcache(out, live)
    elif backend == Backend.MOONCAKE_STORE:
        out = _host_as_external(out)
        _mooncake_store(out, live, how.errors, how.load_errors)
    elif backend == Backend.UMBP:
        out = _host_as_external(out)
        _umbp(out, live, how.errors)
    else:
        raise ValueError(f"unknown simulated backend {backend!r}; known: {', '.join(BACKENDS)}")
    return "\n".join(out) + "\n"
