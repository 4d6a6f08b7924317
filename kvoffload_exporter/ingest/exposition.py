"""Fast Prometheus text-format reader that keeps only the families it is asked for.

prometheus_client's parser handles every family and costs ~8 ms on a real vLLM body; a poller only
needs a few dozen families, so each line is filtered by one slice of its name looked up in a set
(`Selector.keys`) before any parsing, and kept only when its exact sample name is selected. Families are
reported by canonical name (`families.canonical`: any vLLM spelling becomes `vllm:`, `_total` is dropped);
one body is read in one spelling (`selector`'s; kvoffload_exporter.ingest.spellread picks it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from kvoffload_exporter.ingest import lineplan
from kvoffload_exporter.ingest.families import PREFIX, SPELLINGS, canonical, spelled
from kvoffload_exporter.ingest.linecache import Known, LineCache
from kvoffload_exporter.ingest.lineplan import FLOAT_CHARS as _FLOAT_CHARS
from kvoffload_exporter.ingest.lineplan import UTF8

Labels = tuple[tuple[str, str], ...]


class ParseError(ValueError):
    """The body is not a Prometheus text exposition we can read. `reason` is a closed scrape error
    reason (catalogue.SCRAPE_ERROR_REASONS): `parse`, or the cap that was hit."""

    reason = "parse"


class LimitError(ParseError):
    """The body is readable but exceeds a cap of config.limits.Limits (`sample_limit`, `label_limit`)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


Sample = tuple[str, str, Any, float]
"""(canonical family, suffix "" | "bucket" | "sum" | "count", labels as `labels_of` returned them, value).
A plain tuple: a NamedTuple's constructor costs more than parsing the line."""


# The label block up to its closing brace, quote-aware: a `}` inside a value or an OpenMetrics
# exemplar (`... 1 # {trace_id="x"} 0.5`) after the value must not end it.
_BLOCK_RE = re.compile(r'(?:[^"}]|"(?:[^"\\]|\\.)*")*\}')
# Prometheus float syntax (Go's ParseFloat, decimal form), ASCII digits only: no `1_000`, no `١`.
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = frozenset(
    {"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
)  # as Prometheus spells them, any case
_INF = float("inf")
_BLOCK = 1 << 18  # characters: a longer body is split a block at a time, and never planned
_LABEL_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_labels(text: str) -> Labels:
    """`a="1",b="x"` → (("a","1"),("b","x")). Not cached here: callers cache what they derive from it
    (normalise caches its split of each label text), so one label set is never held twice."""
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _LABEL_RE.match(text, pos)
        if not m:
            if text[pos:].strip(" ,"):
                raise ParseError(f"bad label set {{{text}}}")
            break
        value = m.group(2)
        if "\\" in value:
            value = re.sub(r'\\[\\"n]', lambda e: _ESCAPES[e.group(0)], value)
        out.append((m.group(1), value))
        pos = m.end()
    return tuple(out)


def parse_float(text: str, what: str) -> float:
    """A float in Prometheus syntax (decimal, or NaN/±Inf spelled out, which callers then refuse
    or drop); Python-only forms and a decimal that overflows (`1e999`, as Go's ParseFloat) fail."""
    if _FLOAT_RE.fullmatch(text):
        v = float(text)
        if v - v == 0.0:  # false for inf (inf - inf is nan)
            return v
        raise ParseError(f"{what}: {text!r} overflows a float")
    if text.lower() in _NON_FINITE:
        return float(text)
    raise ParseError(f"{what}: not a Prometheus float: {text[:40]!r}")


KEY = 12
"""Characters of a family name after `vllm:`/`vllm_` used as a set key to drop unwanted lines cheaply."""

_HIST_SUFFIXES = ("bucket", "sum", "count")


class Selector(NamedTuple):
    """What `read` keeps: a cheap per-line key set and the exact sample names it maps to families."""

    keys: frozenset[str]
    names: dict[str, tuple[str, str]]  # raw sample name -> (canonical family, suffix)


def selector(families: tuple[str, ...], histograms: frozenset[str], spelling: str = PREFIX) -> Selector:
    """Accept each family in one `spelling` (families.SPELLINGS), with or without `_total`, histograms by
    suffix; TYPE lines in every spelling (a declaration adds no number; prometheus_client's escaping
    renames the samples and keeps `vllm:` in TYPE)."""
    assert all(len(f) >= 5 + KEY for f in families), "family name shorter than the filter key"
    names: dict[str, tuple[str, str]] = {}
    for fam in families:
        base = spelled(fam, spelling)
        if fam in histograms:
            for sfx in _HIST_SUFFIXES:
                names[f"{base}_{sfx}"] = (fam, sfx)
        else:
            names[base] = names[base + "_total"] = (fam, "")
    # TYPE lines of the same families share the per-line key: "# TYPE vllm:prefix_cache_..."[5:17].
    type_keys = {f"E {spelled(f, sp)}"[:KEY] for f in families for sp in SPELLINGS}
    return Selector(frozenset(spelled(f, spelling)[5 : 5 + KEY] for f in families) | type_keys, names)


_MISS = object()


def _lines(text: str, block: int = _BLOCK) -> Iterator[str] | list[str]:
    """The lines of `text`, split a block at a time: never a list of every line of a huge body."""
    if len(text) <= block:
        return text.split("\n")
    return _blocks(text, block)


def _blocks(text: str, block: int) -> Iterator[str]:
    n = len(text)
    pos = 0
    while pos < n:
        end = text.find("\n", pos + block)
        if end < 0:
            yield from text[pos:].split("\n")
            return
        yield from text[pos:end].split("\n")
        pos = end + 1
    yield ""  # the text ended with a newline: split() gives a last empty line too


def read(
    text: str,
    sel: Selector,
    labels_of: Callable[[str], Any] = parse_labels,
    max_samples: int | None = None,
    max_line: int | None = None,
    cache: LineCache | None = None,
    cache_key: object = None,
) -> tuple[Sequence[Sample], AbstractSet[str]]:
    """Return the samples of the selected families and the families named in TYPE lines.

    `_created` samples and look-alike families are dropped by exact name. `labels_of` turns the text
    between the braces into the sample's labels (a cached caller-specific reading saves a second pass
    over every label set). Raises ParseError on a selected line that cannot be read or that repeats a
    series exactly, LimitError past `max_samples` (checked while reading, so a huge body costs no
    more than the cap) or on a selected line longer than `max_line` (reason `label_limit`: refused
    before any regex runs over it, which would cost seconds and gigabytes on a 20 MB label).
    `cache` (with `cache_key` naming `labels_of`) remembers the series of earlier reads: a line
    `<known series> <plain decimal>` is read with one lookup and `float()`; anything else the long way;
    a body of exactly the last one's shape by its `lineplan`, in C (its samples: a `lineplan.Planned`).
    """
    plan_key = plan_of(sel, cache_key, max_samples, max_line)
    _, _, cap, limit = plan_key
    if cache is None:
        return _read_lines(_lines(text), sel, labels_of, cap, limit, cache, {})
    cache.for_reader(cache_key)
    if len(text) > _BLOCK:
        return _read_lines(_lines(text), sel, labels_of, cap, limit, cache, cache.known)
    keys = sel.keys
    got = cache.plan.replay(plan_key, text)
    if got is not None:  # the same shape as the last body: its series by position, in C
        return got  # type: ignore[no-any-return]
    lines = text.split("\n")
    known = cache.known
    samples, typed = _read_lines(lines, sel, labels_of, cap, limit, cache, known)
    was = cache.plan.plan
    cache.plan.after_long_read(
        lambda: lineplan.build(plan_key, lines, keys, 5 + KEY, known, _COMMENTS, samples, typed, limit)
    )
    if cache.plan.plan is not was:  # built from `known` just now (a plan kept through a backoff was not)
        cache.planned()
    return samples, typed


def plan_of(sel: Selector, cache_key: object, max_samples: int | None, max_line: int | None) -> tuple[Any, ...]:
    """What a line plan is valid for (`LineCache.plan.replay`'s key): selector, label reader, caps."""
    cap, limit = (sys.maxsize if v is None else v for v in (max_samples, max_line))
    return (sel.keys, cache_key, cap, limit)


def _read_lines(
    lines: Iterator[str] | list[str], sel: Selector, labels_of: Callable[[str], Any], cap: int, limit: int,
    cache: LineCache | None, known: Known,
) -> tuple[list[Sample], set[str]]:  # fmt: skip
    """`read`'s line loop (see there): every line, the known series with one lookup each."""
    samples: list[Sample] = []
    append = samples.append
    typed: set[str] = set()
    declared: dict[str, str] = {}  # family -> the type its first TYPE line gave
    seen: set[str] = set()
    mark = seen.add
    keys, names = sel
    end = 5 + KEY
    recall = known.get
    # A list of lines no longer than the cap cannot exceed it: the per-sample check is then skipped.
    counting = not isinstance(lines, list) or len(lines) > cap
    for line in lines:
        # One slice + set lookup per line: the cheapest filter that drops most unwanted families.
        if line[5:end] not in keys:
            continue
        if len(line) > limit:
            raise LimitError("label_limit", f"a {len(line)}-character line of a vLLM family (limit {limit})")
        if line[0] == "#":
            _declare(line, typed, declared)
            continue
        key, sep, value = line.rpartition(" ")
        hit = recall(key.encode("utf-8", "surrogatepass"), _MISS)  # as UTF8; never a key "" (no space)
        if hit is None:
            continue  # a series of an unselected family (its name decides, and `key` holds its name)
        # A known series and a plain decimal: float() reads exactly Prometheus' decimal syntax over
        # these characters; a repeat, an overflow or anything else goes the long way for its error.
        if hit is not _MISS and not value.strip(_FLOAT_CHARS):
            try:
                v = float(value)
            except ValueError:
                v = _INF
            if v - v == 0.0 and key not in seen:
                mark(key)
                append(hit + (v,))  # type: ignore[operator]  # noqa: RUF005 (a third cheaper than unpacking)
                if counting and len(samples) > cap:
                    raise _over(cap)
                continue
        new = hit is _MISS and sep != ""
        if _long_way(line, key, new, names, labels_of, cache, seen, append) and len(samples) > cap:
            raise _over(cap)
    return samples, typed


def _over(cap: int) -> LimitError:
    return LimitError("sample_limit", f"more than {cap} samples of the selected vLLM families")


def _long_way(
    line: str,
    key: str,
    new: bool,
    names: dict[str, tuple[str, str]],
    labels_of: Callable[[str], Any],
    cache: LineCache | None,
    seen: set[str],
    append: Callable[[Sample], None],
) -> bool:
    """One sample line with every check; a `new` series is remembered under `key` (the text before the
    line's last space) when that is exactly the series, or when the line is not selected. Appends the
    sample and says so; False for a line of an unselected family."""
    target, series, labels, rest = _split_line(line, names, labels_of)
    if cache is not None and new and (target is None or series == key):
        held = key.encode(*UTF8)
        if cache.room(held):
            cache.known[held] = None if target is None else (*target, labels)
    if target is None:
        return False
    if series in seen:
        raise ParseError(f"duplicate series: {line[:120]!r}")
    seen.add(series)
    fields = rest.split()
    if not fields:
        raise ParseError(f"sample without value: {line[:120]!r}")
    append((target[0], target[1], labels, parse_float(fields[0], series[:120])))
    return True


_COMMENTS: dict[str, str] = {}
"""Comment lines seen by any target → the family a TYPE line declares ("" for other comments). TYPE
lines carry no labels, so every target of one vLLM version sends the same ones: one process-wide
table, bounded in entries and line length (a hostile target inventing lines only starts it over)."""
_MAX_COMMENTS, _MAX_COMMENT = 4096, 256


def _declare(line: str, typed: set[str], declared: dict[str, str]) -> None:
    """A `# TYPE` line's canonical family into `typed` (comment lines remembered); another type for a
    family already declared is a ParseError, as Prometheus refuses such a body."""
    fam = _COMMENTS.get(line)
    if fam is None:
        parts = line.split() if line.startswith("# TYPE ") else ()
        fam = canonical(parts[2]) if len(parts) >= 3 else ""
        if len(line) <= _MAX_COMMENT:
            if len(_COMMENTS) >= _MAX_COMMENTS:
                _COMMENTS.clear()
            _COMMENTS[line] = fam
    if fam:
        kind = line.rsplit(None, 1)[-1]
        if declared.setdefault(fam, kind) != kind:
            raise ParseError(f"family {fam} declared as both {declared[fam]} and {kind[:32]}")
        typed.add(fam)


def _split_line(
    line: str, names: dict[str, tuple[str, str]], labels_of: Callable[[str], Any]
) -> tuple[tuple[str, str] | None, str, Any, str]:
    """(family target or None when not selected, series text, labels, text after the series)."""
    brace = line.find("{")
    space = line.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        target = names.get(line[:brace])
        if target is None:
            return None, "", None, ""
        m = _BLOCK_RE.match(line, brace + 1)
        if m is None:
            raise ParseError(f"unterminated label set: {line[:120]!r}")
        close = m.end() - 1
        return target, line[: close + 1], labels_of(line[brace + 1 : close]), line[close + 1 :]
    raw_name, _, rest = line.partition(" ")
    target = names.get(raw_name)
    if target is None:
        return None, "", None, ""
    return target, raw_name, labels_of(""), rest


def info_number(raw: str | None) -> float | None:
    """A count or size carried in an info label (cache_config_info, kv_offload_config_info, backend info);
    None when absent, empty, "None", not a number or not finite and >= 0 (never NaN, Inf or < 0 out)."""
    if raw is None or raw in ("", "None"):
        return None
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if 0.0 <= v < float("inf") else None
