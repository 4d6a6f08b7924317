"""A target's line plan: where its selected series sit in its body, to re-read a same-shaped body in C.

A vLLM target sends the same lines every poll with new values. After a full read (`exposition.read`)
the plan records the body's shape: how many lines, what each line starts with (a dropped line the
characters the family filter looks at, a kept series the exact text before its value), and the exact
text of its kept comments. A later body is read by the plan only when that shape is exactly the same.
The plan reads the body as UTF-8 bytes: `io.BytesIO.readlines` finds the lines with `memchr`, three
times faster than `str.split`, and `float()` reads bytes. Every check below is one C-level pass:
`map` of `bytes.startswith` over the dropped lines, `bytes.removeprefix` over the series lines (the
length it removed in all says each started with its text), `itemgetter`, tuple comparison,
`bytes.count` over the joined rests; then each selected value is its known series plus `float()` of a
plain decimal. Anything else (a new series, a moved line, a comment changed, a value that is not a
plain finite decimal, a longer one, any kept line past the length cap) returns None and the caller
reads the body the long way, with every check. So the samples and the errors are the same with or
without a plan (tests/test_lineplan.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from io import BytesIO
from operator import add, itemgetter
from typing import Any, NamedTuple

from kvoffload_exporter.ingest.interning import held

UTF8 = ("utf-8", "surrogatepass")
"""How text becomes the bytes a line plan (and the LineCache) holds: any str encodes, none raises."""

FLOAT_CHARS = "0123456789.eE+-"
"""What a plain decimal is made of: over these characters `float()` reads exactly Prometheus' decimal syntax."""
_MAX_VALUE = 40  # characters of a plain decimal value (a double needs at most ~24)
_MAX_REST = _MAX_VALUE + 2  # " <value>\n"; the body's last line has no newline: its value may be 41 long
_NOT_PLAIN = (*b"\t\r\x0b\x0c\x1c\x1d\x1e\x1f_",)  # byte values: `in` over bytes takes an int
"""What `float()` also takes in an ASCII value besides FLOAT_CHARS (whitespace, digit separators), and
its words (`nan`, `inf`), which the finiteness check refuses: an ASCII value without these that `float()` reads is
a plain decimal. One `in` each over the joined values is far cheaper than `str.strip(FLOAT_CHARS)`."""

Pick = Callable[[Sequence[Any]], tuple[Any, ...]]
_PICKS: dict[tuple[int, ...], Pick] = {}
"""Index tuple → picker, shared by every target whose body has the same layout (one vLLM version).
Bounded in entries and in the length of what it shares."""
_MAX_PICKS, _MAX_SHARED = 1024, 4096
MAX_LINES = 16384
"""A body of more lines is never planned (a vLLM body has ~750): a plan costs ~8 bytes a kept line."""


def _every(seq: Sequence[Any]) -> tuple[Any, ...]:
    """The Pick of every item, in order (of a tuple: the tuple itself)."""
    return tuple(seq)


def pick(indexes: Sequence[int]) -> Pick:
    """A callable returning the items at `indexes` as a tuple (itemgetter returns a bare item for one)."""
    key = tuple(indexes)
    got = _PICKS.get(key)
    if got is None:
        if len(key) > 1:
            got = itemgetter(*key)
        elif key:
            i = key[0]

            def got(seq: Sequence[Any]) -> tuple[Any, ...]:
                return (seq[i],)

        else:

            def got(seq: Sequence[Any]) -> tuple[Any, ...]:
                return ()

        if len(key) <= _MAX_SHARED:
            if len(_PICKS) >= _MAX_PICKS:
                _PICKS.clear()
            _PICKS[key] = got
    return got


class Plan(NamedTuple):
    """One body's shape (see the module doc); `key` names the read's parameters it is valid for."""

    key: tuple[Any, ...]
    lines: int  # as `readlines` counts them: a body ending in a newline has no empty last line
    dropped: Pick  # the lines the family filter drops, told by what they start with:
    starts: tuple[bytes, ...]  # ... the characters the filter reads
    exact: Pick  # kept comments and dropped lines too short to be told by their start
    texts: tuple[bytes, ...]  # ... their exact text, with its newline
    series: Pick  # every other kept line: its series' text, then " <value>\n"
    fronts: tuple[bytes, ...]  # ... each series' text up to its model_name's value (shared), ...
    backs: tuple[bytes, ...]  # ... then the rest of it (this target's own, a few distinct objects)
    size: int  # ... their length in all
    room: int  # the fewest characters a series' value may take before its line passes the cap
    selected: Pick  # of those, the positions of the selected series
    families: tuple[str, ...]  # each selected series' family, ...
    suffixes: tuple[str, ...]  # ... its suffix ("", "bucket", "sum", "count") ...
    own: tuple[Any, ...]  # ... its labels' first part (normalise's: the engine), or its labels whole: the target's own
    shared: tuple[tuple[Any, ...], ...]  # ... and their other parts, a column each, held once for a vLLM version
    typed: frozenset[str]

    @property
    def prefixes(self) -> tuple[bytes, ...]:
        """Each series' text (as the LineCache keys it)."""
        return tuple(map(add, self.fronts, self.backs))

    @property
    def labels(self) -> tuple[Any, ...]:
        """Each selected series' labels, as the read that built the plan got them (equal, not the same objects)."""
        return tuple(self.labels_at(_every))

    def labels_at(self, at: Pick) -> Iterable[Any]:
        """The labels of the selected series `at` picks."""
        return zip(at(self.own), *map(at, self.shared)) if self.shared else at(self.own)


_MODEL = b'model_name="'
"""Where a series' text is cut in two: what precedes the value of `model_name` is the same for every
target of one vLLM version, and held once; what follows it (the model name, the labels after it) is
the target's own, and the same few texts for all its series. A real body's ~220 series texts: ~30 KiB
a target whole, ~2 KiB cut. Where the cut falls changes no reading: the two parts make the text."""

_STARTS: dict[bytes, bytes] = {}
"""Dropped names and comment lines: the same for every target of one vLLM version."""
_MAX_STARTS, _MAX_SHARED_TEXT = 4096, 256  # a longer exact line (a comment) is held by its own plan
_PARTS: dict[Any, Any] = {}
"""A plan's parts that no label value decides (its starts, exact texts, families, suffixes and TYPE
lines): the same for every target of one vLLM version, held once (~14 KiB a target otherwise)."""
_MAX_PARTS = 1024


def build(
    key: tuple[Any, ...],
    lines: list[str],
    keys: frozenset[str],
    end: int,
    known: Mapping[bytes, Any],
    comments: Mapping[str, str],
    samples: list[Any],
    typed: set[str],
    max_line: int,
) -> Plan | None:
    """The plan of a body just read the long way (`lines`: its `str.split("\\n")`) into `samples`/`typed`,
    or None when some line cannot be re-read by position (a series not remembered in `known`, a comment
    not in `comments`, a line near `max_line`, which a longer value would take past it)."""
    if len(lines) > MAX_LINES:
        return None
    last = len(lines) - 1
    count = last if lines[last] == "" else len(lines)  # readlines gives no empty line after the last newline
    starts: list[bytes] = []
    dropped: list[int] = []
    fronts: list[bytes] = []
    backs: list[bytes] = []
    own: dict[bytes, bytes] = {}  # this target's backs, one object each
    texts: list[bytes] = []
    exact: list[int] = []
    series: list[int] = []
    selected: list[int] = []
    heads: list[tuple[Any, ...]] = []  # (family, suffix, labels) of each selected series
    room = max_line
    size = 0
    for i in range(count):
        line = lines[i]
        if line[5:end] not in keys:  # dropped: a line starting with the same `end` characters is too
            if len(line) >= end:
                starts.append(held(_STARTS, line[:end].encode(*UTF8), _MAX_STARTS))
                dropped.append(i)
                continue
        elif line[:1] == "#":
            if comments.get(line) is None:
                return None
        else:
            text = line.rpartition(" ")[0]  # "" without a space
            series_key = text.encode(*UTF8)
            if not text or series_key not in known or len(text) + _MAX_REST > max_line:
                return None
            cut = series_key.find(_MODEL)
            cut = len(series_key) if cut < 0 else cut + len(_MODEL)
            front, back = series_key[:cut], series_key[cut:]
            fronts.append(held(_STARTS, front, _MAX_STARTS) if len(front) <= _MAX_SHARED_TEXT else front)
            backs.append(own.setdefault(back, back))
            size += len(series_key)
            room = min(room, max_line - len(text) - 1)
            hit = known[series_key]
            if hit is not None:
                selected.append(len(series))
                heads.append(hit)
            series.append(i)
            continue
        exact.append(i)
        whole = (line + "\n" if i < last else line).encode(*UTF8)
        texts.append(held(_STARTS, whole, _MAX_STARTS) if len(whole) <= _MAX_SHARED_TEXT else whole)
    if len(heads) != len(samples) or any(s[:3] != h for s, h in zip(samples, heads)):
        return None
    families, suffixes, labels = (tuple(c) for c in zip(*heads)) if heads else ((), (), ())
    engines, shared = _columns(labels)
    return Plan(
        key,
        count,
        pick(dropped),
        _shared(tuple(starts)),
        pick(exact),
        _shared(tuple(texts)),
        pick(series),
        _shared(tuple(fronts)),
        tuple(backs),
        size,
        room,
        pick(selected),
        _shared(families),
        _shared(suffixes),
        engines,
        shared,
        _shared(frozenset(typed)),
    )


def _shared(part: Any) -> Any:
    return held(_PARTS, part, _MAX_PARTS)


def _columns(labels: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[tuple[Any, ...], ...]]:
    """(own, shared): labels split in parts of one length (normalise's: the engine, the other labels, pid,
    `le`) as their first part's column, the target's own, and each other part's column held once; any other
    labels whole, as `own`. Whole, each series' labels are a tuple of the target's (its engine is in it):
    ~5.6 KiB a target of a real body, where the columns are one tuple of pointers."""
    width = len(labels[0]) if labels and type(labels[0]) is tuple else 0
    if width < 2 or any(type(one) is not tuple or len(one) != width for one in labels):
        return labels, ()
    first, *rest = zip(*labels)
    try:
        return first, _shared(tuple(rest))
    except TypeError:  # a part that cannot be hashed: kept whole, by this plan alone
        return labels, ()


def entries(plan: Plan) -> dict[bytes, tuple[str, str, Any] | None]:
    """What a LineCache knew of the plan's series: each series' text → (family, suffix, labels), None for
    a series `read` skips. A planned target's cache keeps only its plan and rebuilds this when the plan
    misses (the same keys and heads: the cache's budget counted them once)."""
    texts = plan.prefixes
    known: dict[bytes, tuple[str, str, Any] | None] = dict.fromkeys(texts)
    known.update(zip(plan.selected(texts), zip(plan.families, plan.suffixes, plan.labels_at(_every))))
    return known


def lines_of(text: str) -> list[bytes]:
    """`text` as UTF-8 lines, each with its newline (`memchr` finds them: ~3x faster than `str.split`)."""
    return BytesIO(text.encode(*UTF8)).readlines()


def replay(plan: Plan, lines: list[bytes]) -> Any:
    """(samples, typed) of a body (`lines_of`) of exactly the plan's shape with plain finite
    decimal values, else None."""
    if len(lines) != plan.lines or not all(map(bytes.startswith, plan.dropped(lines), plan.starts)):
        return None  # a moved line, or a dropped line that now names a selected family
    if plan.exact(lines) != plan.texts:
        return None  # a comment changed
    series = plan.series(lines)
    rests: tuple[bytes, ...] = tuple(map(bytes.removeprefix, map(bytes.removeprefix, series, plan.fronts), plan.backs))
    if rests:
        joined = b"".join(rests)
        # Each series line starts with its text: its front, then its back (each removeprefix takes all of
        # its part or nothing, and no text is empty: only all of every one makes the size)
        if len(b"".join(series)) - len(joined) != plan.size:
            return None  # a new series, a moved line
        # ... then " <value>\n" (the body's last line: no newline). A rest holds a newline only at its
        # end, so n - 1 of "\n " and a first " " say every rest starts with its space; n spaces, no other.
        if joined[:1] != b" " or joined.count(b" ") != len(rests) or joined.count(b"\n ") != len(rests) - 1:
            return None  # a longer name or label set, a timestamp, an exemplar, a series without a value
        # no line past the cap: all the rests fit in the least room (one len), else each in _MAX_REST,
        # which the plan left to every series
        if len(joined) > plan.room and max(map(len, rests)) > _MAX_REST:
            return None  # a value that could take its line past the cap: the long way says
    values = plan.selected(rests)
    text = b"".join(values)
    if not text.isascii() or any(map(text.__contains__, _NOT_PLAIN)):
        return None  # not a plain decimal (float() would also take these)
    try:
        floats = tuple(map(float, values))  # the space and newline around each are whitespace to float()
    except ValueError:
        return None
    total = sum(floats)  # inf or nan if any value is (or, harmlessly, if finite ones overflow together)
    if total - total != 0.0:
        return None  # an overflow (1e999): the long way raises it
    return Planned(plan, floats, text), plan.typed  # the plan's own TYPE lines: shared, never changed


class Planned(Sequence[Any]):
    """A planned read's samples: the plan's heads (family, suffix, labels), each with this body's value.
    The tuples are built only when the samples are read one by one; `pick` builds just the ones a caller
    picks by position (normalise reads most samples by position from the values alone: histplan).
    `text` is the values as the body wrote them: what a target keeps to tell an idle poll (the same text
    is the same values), ~1.3 KiB where the floats are ~5 KiB."""

    __slots__ = ("_all", "plan", "text", "values")

    def __init__(self, plan: Plan, values: tuple[float, ...], text: bytes = b"") -> None:
        self.plan = plan
        self.values = values
        self.text = text
        self._all: list[Any] | None = None

    def pick(self, at: Pick) -> list[Any]:
        """The samples `at` picks, as `at(list(self))` gives them."""
        p = self.plan
        return list(zip(at(p.families), at(p.suffixes), p.labels_at(at), at(self.values)))

    def rows(self, at: Pick) -> Iterator[tuple[Any, ...]]:
        """The samples `at` picks with their labels' parts spread out: (family, suffix, *labels, value), as
        `flat` gives them, without building each sample's labels (a tuple each) on the way."""
        p = self.plan
        if not p.shared:
            return flat(self.pick(at))
        return zip(at(p.families), at(p.suffixes), at(p.own), *map(at, p.shared), at(self.values))

    def _samples(self) -> list[Any]:
        if self._all is None:
            p = self.plan
            self._all = list(zip(p.families, p.suffixes, p.labels_at(_every), self.values))
        return self._all

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: Any) -> Any:
        return self._samples()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._samples())


def flat(samples: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """(family, suffix, *labels, value) of each sample (family, suffix, labels, value), labels a tuple."""
    if not samples:
        return iter(())
    families, suffixes, labels, values = zip(*samples)
    return zip(families, suffixes, *zip(*labels), values)


class Slot:
    """A target's plan and when to build the next one. A body whose shape changes every poll (label
    values churning) would pay a build (~2 long reads) per poll for nothing: after a miss, or a body
    that cannot be planned, the next build waits 1, 2, 4 … up to 64 long reads; a hit starts over."""

    __slots__ = ("backoff", "dropped", "hit", "plan", "wait")

    def __init__(self) -> None:
        self.plan: Plan | None = None
        self.dropped: Plan | None = None  # the plan the last miss dropped, until its entries are taken
        self.hit = False  # the last body was read by `plan` (its samples: a Planned with the plan's heads)
        self.wait = 0
        self.backoff = 0

    def replay(self, key: tuple[Hashable, ...], text: str) -> Any:
        plan = self.plan
        if plan is None or plan.key != key:
            self.hit = False
            return None
        got = replay(plan, lines_of(text))
        self.hit = got is not None
        if got is None:
            self.plan, self.dropped = None, plan
            self._missed()
            return None
        self.backoff = 0
        return got

    def entries(self) -> dict[bytes, tuple[str, str, Any] | None]:
        """`entries` of the plan, or of the one the last miss dropped ({} without either)."""
        plan, self.dropped = self.plan or self.dropped, None
        return {} if plan is None else entries(plan)

    def after_long_read(self, make: Callable[[], Plan | None]) -> None:
        """After a body was read the long way: `make` its plan, unless the backoff says wait."""
        self.hit = False
        if self.wait > 0:
            self.wait -= 1
            return
        self.plan = make()
        if self.plan is None:  # this shape cannot be planned: as costly as a miss, and as likely to repeat
            self._missed()

    def _missed(self) -> None:
        self.backoff = min(64, 2 * self.backoff or 1)
        self.wait = self.backoff


__all__ = [
    "FLOAT_CHARS",
    "UTF8",
    "Pick",
    "Plan",
    "Planned",
    "Slot",
    "build",
    "entries",
    "flat",
    "lines_of",
    "pick",
    "replay",
]
