"""Exposition writer driven by the catalogue: HELP/TYPE come from there, never from call sites.

Samples are collected per catalogue family into *fragments* (family → ready text of its sample
lines). A target's fragment is rebuilt only when that target polls; `/metrics` merges the fragments
of all targets with one HELP/TYPE header per family (`merge`). Sample lines are the same in text
0.0.4 and OpenMetrics 1.0: only the headers and the `# EOF` trailer differ, so one fragment serves
both formats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from kvoffload_exporter.catalogue import CATALOGUE, Metric
from kvoffload_exporter.enums import MetricType
from kvoffload_exporter.expose.mergeplan import Frag, Merger, shared_shape
from kvoffload_exporter.ingest.interning import held

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

Fragment = Mapping[str, str]
"""Catalogue family name → its sample lines, each ending in a newline."""

Heads = dict[tuple[Hashable, ...], tuple[Any, ...]]
"""(sample name, label values...) → (the line last written, newline included, its value): label keys are
fixed per name, and most series repeat their value from one poll to the next; the line's text before its
last space is the series (`name{k="v",...}`), held once. A block of series (`Exposition.block`) is held as
("\0", name, key...) → (its lines, its inputs); series written together (`Exposition.series`) as
("\1", key...) → (their families and the series of each (None: one each), both held once for every target
(`_RUNS`), where each line's value starts, their values, each family's text: what the fragment holds)."""

_RUNS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_HEADS: Heads = {}  # shared by short-lived expositions; pollers pass their own
_MAX_HEADS = 50_000


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        v = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return v


def _head(name: str, labels: Mapping[str, str]) -> str:
    """A series' text before its value: `name{k="v",...}`, or the name alone without labels."""
    if not labels:
        return name
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return f"{name}{{{body}}}"


def format_value(v: float) -> str:
    if v - v == 0.0:  # finite (the common case first: one test instead of isnan and isinf)
        return repr(float(v)) if v else "0.0"  # a whole number as `184.0`; -0.0 as 0.0
    if v != v:
        return "NaN"
    return "+Inf" if v > 0 else "-Inf"


_LABELS = {name: m.labels for name, m in CATALOGUE.items()}
_SAMPLE_LABELS = {
    **_LABELS,
    **{
        f"{n}{sfx}": m.labels[:-1]
        for n, m in CATALOGUE.items()
        if m.type == MetricType.SUMMARY
        for sfx in ("_sum", "_count")
    },
}
"""Each sample name's label keys: a summary's `_sum` and `_count` lack its last label, `quantile`."""

Spec = tuple[str, str, Mapping[str, str]]
"""(family, sample name, labels) of one series written by `Exposition.series`."""


class Exposition:
    """Collects samples per catalogue metric; `fragment()` for merging, `text()` for a whole body."""

    def __init__(self, heads: Heads | None = None) -> None:
        self._lines: dict[str, list[str]] = {}
        self._heads = _HEADS if heads is None else heads

    def add(self, name: str, value: float | None, labels: Mapping[str, str] | None = None) -> None:
        """Add one sample; a None or non-finite value is skipped (undefined, not zero, never NaN or ±Inf,
        whichever source computed it). Labels must match the catalogue."""
        if value is None or value - value != 0.0:  # None, NaN or ±Inf (inf - inf is nan)
            return
        keys = _LABELS[name]
        if labels:
            if tuple(labels) != keys:
                raise ValueError(f"{name}: labels {tuple(labels)} != catalogue {keys}")
            line = self._line(name, labels, value)
        elif keys:
            raise ValueError(f"{name}: labels () != catalogue {keys}")
        else:
            line = self._line(name, {}, value)
        out = self._lines.get(name)
        if out is None:
            self._lines[name] = [line]
        else:
            out.append(line)

    def add_states(self, name: str, labels: Mapping[str, str], states: Iterable[str], current: str | None) -> None:
        """A state set: one series per state, 1 for the current one (none when `current` is None)."""
        state_label = CATALOGUE[name].labels[-1]
        rows = lambda: (({**labels, state_label: s}, 1.0 if s == current else 0.0) for s in states)  # noqa: E731
        self.block(name, tuple(labels.values()), current, rows)

    def block(
        self,
        name: str,
        key: tuple[str, ...],
        inputs: object,
        rows: Callable[[], Iterable[tuple[Mapping[str, str], float]]],
    ) -> None:
        """Series of `name` that `inputs` alone decide (a state set, a target's error counts), `key`
        naming the block among its family's: written as `add` writes them, then kept as one text that
        is reused while `inputs` repeat (most polls change none of them)."""
        k = ("\0", name, *key)
        rec = self._heads.get(k)
        if rec is None or rec[1] != inputs:
            out = self._lines.setdefault(name, [])
            n, heads = len(out), self._heads
            self._heads = {}  # the block's text is what is kept: not its series one by one as well
            try:
                for labels, value in rows():
                    self.add(name, value, labels)
            finally:
                self._heads = heads
            rec = ("".join(out[n:]), inputs)
            del out[n:]
            if not out:  # a fragment's families each have a text
                del self._lines[name]
            heads[k] = rec
        if rec[0]:
            self._lines.setdefault(name, []).append(rec[0])

    def series(
        self,
        key: tuple[Hashable, ...],
        values: tuple[float | None, ...],
        specs: Callable[[], Sequence[Spec]],
    ) -> None:
        """Series whose names and labels `key` alone decides (an engine's counters, its windowed
        ratios, its evidence rows): `values[i]` is the value of `specs()[i]`, skipped like `add` skips
        it. One lookup and one comparison for all of them; a value that changed is formatted again,
        the others reuse their lines (`add` per series costs ~3× more). `specs` is called only the first
        time, or when a series that had no value gets one."""
        k = ("\1", *key)
        rec = self._heads.get(k)
        if rec is None or len(rec[3]) != len(values):
            names, texts = self._new_series(k, values, specs)
        elif rec[3] != values:
            names, counts, cuts, was, texts = rec
            if counts is None:  # one series per family: texts[i] is series i's line
                lines = list(texts)
                fresh: list[str] | None = lines
                for i, (w, v) in enumerate(zip(was, values)):
                    if w == v:  # equal values format alike (0.0 and -0.0 both as "0.0")
                        continue
                    if v is None or v - v != 0.0:
                        lines[i] = ""
                    elif lines[i]:
                        lines[i] = f"{lines[i][: cuts[i]]}{format_value(v)}\n"
                    else:  # the series had no value: its text is written from its labels again
                        fresh = None
                        break
            else:
                fresh = _changed_runs(texts, counts, cuts, was, values)
            if fresh is None:
                names, texts = self._new_series(k, values, specs)
            else:
                texts = tuple(fresh)
                self._heads[k] = (names, counts, cuts, values, texts)
        else:
            names, texts = rec[0], rec[4]
        get = self._lines.get
        for name, text in zip(names, texts):
            if text:  # "": no value this time
                out = get(name)
                if out is None:
                    self._lines[name] = [text]
                else:
                    out.append(text)

    def _new_series(
        self,
        k: tuple[Hashable, ...],
        values: tuple[float | None, ...],
        specs: Callable[[], Sequence[Spec]],
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        rows = specs()
        if len(rows) != len(values):
            raise ValueError(f"{len(values)} values for {len(rows)} series")
        names: list[str] = []
        counts: list[int] = []
        cuts: list[int] = []
        texts: list[str] = []
        for (family, sample, labels), v in zip(rows, values):
            if tuple(labels) != _SAMPLE_LABELS.get(sample):
                raise ValueError(f"{sample}: labels {tuple(labels)} != catalogue {_SAMPLE_LABELS.get(sample)}")
            if v is None or v - v != 0.0:
                line, cut = "", 0
            else:
                head = f"{_head(sample, labels)} "
                line, cut = f"{head}{format_value(v)}\n", len(head)
            cuts.append(cut)
            if names and names[-1] == family:  # the family's series in a row: one text, as the fragment holds it
                counts[-1] += 1
                texts[-1] += line
            else:
                names.append(family)
                counts.append(1)
                texts.append(line)
        runs = (tuple(names), None if len(names) == len(rows) else tuple(counts))
        shared = held(_RUNS, runs, 4096)
        if len(self._heads) > _MAX_HEADS:
            self._heads.clear()
        text = tuple(texts)
        self._heads[k] = (*shared, tuple(cuts), values, text)
        return shared[0], text

    def add_histogram(
        self,
        name: str,
        labels: Mapping[str, str],
        bounds: Sequence[float],
        cumulative: Sequence[float],
        total: float,
    ) -> None:
        """A histogram family: `cumulative[i]` counts observations <= bounds[i]; the last is the +Inf
        bucket and the `_count`."""
        self._check(name, labels, len(bounds) + 1 == len(cumulative))
        out = self._lines.setdefault(name, [])
        for b, c in zip((*bounds, math.inf), cumulative):
            out.append(self._line(name + "_bucket", {**labels, "le": format_value(b)}, c))
        out.append(self._line(name + "_sum", labels, total))
        out.append(self._line(name + "_count", labels, cumulative[-1]))

    def add_summary(
        self,
        name: str,
        labels: Mapping[str, str],
        quantiles: Mapping[float, float],
        count: float,
        total: float | None = None,
    ) -> None:
        """A summary family: quantile samples, `_count` and (when it can be known) `_sum`, both cumulative
        (a summary's count never goes down but at a restart). The catalogue lists `quantile` as the last
        label; `labels` are the others. Non-finite values are left out, as in `add`."""
        qs = tuple(quantiles)

        def specs() -> list[Spec]:  # series() checks each sample's labels against the catalogue
            rows: list[Spec] = [(name, name, {**labels, "quantile": str(q)}) for q in qs]
            return [*rows, (name, name + "_sum", labels), (name, name + "_count", labels)]

        self.series((name, *labels.values(), *qs), (*quantiles.values(), total, count), specs)

    @staticmethod
    def _check(name: str, labels: Mapping[str, str], ok: bool) -> None:
        m = CATALOGUE[name]
        if tuple(labels) != m.labels or not ok:
            raise ValueError(f"{name}: labels {tuple(labels)} != catalogue {m.labels} or bad bucket count")

    def _line(self, name: str, labels: Mapping[str, str], value: float) -> str:
        key = (name, *labels.values())
        last = self._heads.get(key)
        if last is not None:
            if last[1] == value:  # equal values format alike (0.0 and -0.0 both as "0.0")
                same: str = last[0]
                return same
            head = last[0][: last[0].rindex(" ")]  # a value has no space
        else:
            # The same series are written after every poll: format each series name once.
            if len(self._heads) > _MAX_HEADS:
                self._heads.clear()
            head = _head(name, labels)
        line = f"{head} {format_value(value)}\n"
        self._heads[key] = (line, value)
        return line

    def fragment(self) -> Frag:
        # every list holds a text (`block` leaves none empty); one text is itself joined
        return Frag(shared_shape(tuple(self._lines)), tuple(map("".join, self._lines.values())))

    def text(self) -> str:
        return merge([self.fragment()])


def _changed_runs(
    texts: tuple[str, ...],
    counts: tuple[int, ...],
    cuts: tuple[int, ...],
    was: tuple[float | None, ...],
    values: tuple[float | None, ...],
) -> list[str] | None:
    """Families of several series in a row: each family's text written again from its lines (a raw newline
    ends each line: label values escape theirs) where one of its values changed ("" without one), or None
    when a series that had no line gets a value."""
    fresh = list(texts)
    at = 0
    for i, n in enumerate(counts):
        whole = n == len(was)  # one family, the common case: no slices
        old, new, cut = (was, values, cuts) if whole else (was[at : at + n], values[at : at + n], cuts[at : at + n])
        at += n
        if old == new:
            continue
        lines = texts[i].split("\n")  # its lines, then "" after the last newline
        gone = False
        if len(lines) > n:  # every series had a line (the common case): line j is series j's
            for j, (w, v) in enumerate(zip(old, new)):
                if w != v:
                    if v is None or v - v != 0.0:
                        lines[j], gone = "", True
                    else:
                        lines[j] = f"{lines[j][: cut[j]]}{format_value(v)}"
        else:
            k = 0
            for w, v, c in zip(old, new, cut):
                if w is None or w - w != 0.0:  # no line
                    if v is not None and v - v == 0.0:
                        return None
                    continue
                if w != v:
                    if v is None or v - v != 0.0:
                        lines[k], gone = "", True
                    else:
                        lines[k] = f"{lines[k][:c]}{format_value(v)}"
                k += 1
        fresh[i] = "".join(f"{line}\n" for line in lines if line) if gone else "\n".join(lines)
    return fresh


def _help(m: Metric, openmetrics: bool) -> str:
    text = m.help.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def _om_family(m: Metric) -> tuple[str, str]:
    """OpenMetrics family name and type: counters and infos lose their sample suffix in the family
    name. A stateset stays a gauge: OpenMetrics wants the state label named like the family, and the
    series must be the same whichever format Prometheus negotiates."""
    if m.type == MetricType.COUNTER:
        return m.name.removesuffix("_total"), "counter"
    if m.type == MetricType.INFO:
        return m.name.removesuffix("_info"), "info"
    return m.name, "gauge" if m.type == MetricType.STATESET else m.prom_type


def header(m: Metric, openmetrics: bool = False) -> str:
    name, typ = _om_family(m) if openmetrics else (m.name, m.prom_type)
    return f"# HELP {name} {_help(m, openmetrics)}\n# TYPE {name} {typ}\n"


_HEADERS = {om: {name: header(m, om) for name, m in CATALOGUE.items()} for om in (False, True)}
_ORDER = tuple(CATALOGUE)
_MERGE = Merger(_ORDER, _HEADERS)


def merge(fragments: Iterable[Fragment], openmetrics: bool = False, foreign: str = "") -> str:
    """One body from many fragments: catalogue order, HELP/TYPE once per family, fragments in the
    order given. `foreign` is text already encoded in the same format (prometheus_client's own
    collectors), placed after the catalogue families."""
    return _MERGE(fragments, openmetrics, (foreign, "# EOF\n") if openmetrics else (foreign,))


def _media_ranges(header: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for part in header.split(","):
        kind, *params = (p.strip() for p in part.split(";"))
        if kind:
            out.append((kind.lower(), dict(p.partition("=")[::2] for p in params if "=" in p)))
    return out


def _q(params: Mapping[str, str]) -> float:
    try:
        return float(params.get("q", "1"))
    except ValueError:
        return 0.0


def wants_openmetrics(accept: str) -> bool:
    """OpenMetrics when the Accept header ranks it at least as high as the text format."""
    om, text = 0.0, 0.0
    for kind, params in _media_ranges(accept):
        if kind == "application/openmetrics-text" and params.get("version", "1.0.0") in ("1.0.0", "0.0.1"):
            om = max(om, _q(params))
        elif kind in ("text/plain", "*/*", "text/*"):
            text = max(text, _q(params))
    return om > 0 and om >= text


def accepts_gzip(accept_encoding: str) -> bool:
    return any(kind == "gzip" and _q(params) > 0 for kind, params in _media_ranges(accept_encoding))
