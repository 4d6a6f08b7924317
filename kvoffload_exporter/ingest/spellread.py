"""Read a body in one spelling per family: `vllm:`, `vllm_` or `ray_vllm_`, never two added.

vLLM names its families `vllm:<name>`. OpenTelemetry and managed-Prometheus pipelines (and
prometheus_client's underscore escaping) deliver them as `vllm_<name>`; Ray Serve LLM re-exports them
as `ray_vllm_<name>`. A body may carry two spellings of one family (a collector re-exporting beside the
original): both selected, every byte and token would count twice. So the line selector is built per
spelling (`exposition.selector`) and a body is read in the one spelling its sample lines use, by the
fast path (its own line cache and plan: the cache key names the spelling, so a line skipped in one
spelling is never taken as skipped in another). A body whose sample lines use several spellings is read
once per spelling, the long way, and each family is taken from the first spelling (families.SPELLINGS
order) that carries it: the same family is read once, a family only one spelling carries is still read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from kvoffload_exporter.ingest.exposition import LimitError, Sample, Selector, plan_of, read, selector
from kvoffload_exporter.ingest.families import ESCAPED, NATIVE_NAMESPACES, PREFIX, SPELLINGS
from kvoffload_exporter.ingest.linecache import LineCache

Selectors = dict[str, Selector]

_NATIVE: dict[str, tuple[str, ...]] = {sp: NATIVE_NAMESPACES if sp == ESCAPED else () for sp in SPELLINGS}
"""Per spelling, the name prefixes a plugin registers in it itself: a line of one is no sign of it."""


def selectors(families: tuple[str, ...], histograms: frozenset[str]) -> Selectors:
    """One line selector per spelling of the same families."""
    return {sp: selector(families, histograms, sp) for sp in SPELLINGS}


def _has(text: str, spelling: str) -> bool:
    """Whether a sample line starts with `spelling` (not a plugin's own name in it). A few C-level
    `find`s: vLLM's `vllm:` bodies carry no `vllm_` line but llm-d's own family."""
    native = _NATIVE[spelling]
    at = 0 if text.startswith(spelling) else text.find("\n" + spelling) + 1
    if at == 0 and not text.startswith(spelling):
        return False
    while native and text.startswith(native, at):
        at = text.find("\n" + spelling, at) + 1
        if at == 0:
            return False
    return True


def _last(cache: LineCache | None, cache_key: object, sels: Selectors) -> str | None:
    """The spelling the cache's last read of this reader was in, None after a read of several."""
    key = cache.key if cache is not None else None
    if isinstance(key, tuple) and len(key) == 2 and key[0] == cache_key and key[1] in sels:
        return str(key[1])
    return None


def spellings_in(text: str) -> tuple[str, ...]:
    """The vLLM spellings the body's sample lines use, in preference order (TYPE lines do not count:
    the escaping keeps `vllm:` there while renaming the samples)."""
    return tuple(sp for sp in SPELLINGS if _has(text, sp))


def read_spelled(
    text: str,
    sels: Selectors,
    labels_of: Callable[[str], Any],
    max_samples: int | None,
    max_line: int | None,
    cache: LineCache | None,
    cache_key: object,
) -> tuple[Sequence[Sample], AbstractSet[str]]:
    """`exposition.read` of the body in its spelling; several spellings: each family from the first.
    A body of the last one's exact shape (its line plan replays) has the last one's spelling: the plan
    checks the start of every line, so telling the spelling again (a scan of the body) is skipped."""
    last = _last(cache, cache_key, sels)
    if cache is not None and last is not None:
        key = (cache_key, last)
        cache.for_reader(key)  # as `read` does before its own replay
        got = cache.plan.replay(plan_of(sels[last], key, max_samples, max_line), text)
        if got is not None:
            return got  # type: ignore[no-any-return]
    found = spellings_in(text)
    if len(found) <= 1:
        sp = found[0] if found else PREFIX
        return read(text, sels[sp], labels_of, max_samples, max_line, cache, (cache_key, sp))
    if cache is not None:  # not read by a plan: what the cache remembers of the last read is not this one's
        cache.for_reader((cache_key, found))
        cache.plan.hit = False
    out: list[Sample] = []
    typed: set[str] = set()
    taken: set[str] = set()
    for sp in found:
        samples, declared = read(text, sels[sp], labels_of, max_samples, max_line)
        typed |= declared
        fams = {s[0] for s in samples} - taken
        out.extend(s for s in samples if s[0] in fams)
        taken |= fams
    if max_samples is not None and len(out) > max_samples:
        raise LimitError("sample_limit", f"more than {max_samples} samples of the selected vLLM families")
    return out, typed
