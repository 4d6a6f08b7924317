"""Merging fragments with C loops: one plan per run of fragment shapes, the texts moved by itemgetter and zip.

A fleet's targets send fragments of one shape (the same families, in the same order), so consecutive
fragments of one shape are read as columns at once (`zip(*texts)`: one tuple per family, the run's texts
in fragment order) and a plan, kept per sequence of shapes, picks the headers and columns in catalogue
order for one `"".join`. A target's fragment is a `Frag`: its families as one tuple shared by every
fragment of that shape (`shape`), and its texts in that order (`texts`), ~0.5 KiB where a dict of ~50
families is ~1.6 KiB; any other mapping is read as one. Only runs of *consecutive* fragments are
grouped, so each family's texts keep the order the fragments were given. Per merge the Python work
is one step per fragment (its shape) and one per run, not one per family of every fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from kvoffload_exporter.ingest.interning import held

Texts = Sequence[str]

_SHAPES: dict[tuple[str, ...], tuple[str, ...]] = {}
_MAX_SHAPES = 4096


def shared_shape(shape: tuple[str, ...]) -> tuple[str, ...]:
    """The one tuple of these families held for every fragment of that shape (a fleet has a handful)."""
    return held(_SHAPES, shape, _MAX_SHAPES)


class Frag(Mapping[str, str]):
    """A fragment: family name → its sample lines, as its families (`shape`, shared) and their texts."""

    __slots__ = ("shape", "texts")

    def __init__(self, shape: tuple[str, ...], texts: tuple[str, ...]) -> None:
        self.shape = shape
        self.texts = texts

    def __getitem__(self, name: str) -> str:
        try:
            return self.texts[self.shape.index(name)]
        except ValueError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.shape)

    def __len__(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Frag({dict(zip(self.shape, self.texts))!r})"


class Plan:
    """For one sequence of shapes: the present families' headers as columns of one text, and the picker
    of headers and columns in body order."""

    __slots__ = ("head_texts", "heads", "pick")

    def __init__(self, shapes: Sequence[tuple[str, ...]], order: Sequence[str], headers: Mapping[str, str]):
        where: dict[str, list[int]] = {}
        column = 0
        for shape in shapes:
            for name in shape:
                where.setdefault(name, []).append(column)
                column += 1
        present = [name for name in order if name in where]  # a name outside the catalogue: never picked
        self.head_texts = [headers[name] for name in present]
        self.heads: list[Texts] = [(text,) for text in self.head_texts]
        picks: list[int] = []
        for i, name in enumerate(present):
            picks.append(i)
            picks.extend(len(present) + c for c in where[name])
        # itemgetter of one index returns the item, not a tuple of it: a plan always picks a header and a column
        self.pick: Callable[[Sequence[Any]], Iterable[Any]] = itemgetter(*picks) if picks else lambda _: ()


class Merger:
    """`merge` with its plans (a handful per process: shapes repeat from one poll to the next), bounded."""

    def __init__(self, order: Sequence[str], headers: Mapping[bool, Mapping[str, str]], limit: int = 64):
        self._order = order
        self._headers = headers
        self._limit = limit
        self._plans: dict[tuple[Any, ...], Plan] = {}

    def __call__(self, fragments: Iterable[Mapping[str, str]], openmetrics: bool, tail: Sequence[str]) -> str:
        shapes: list[tuple[str, ...]] = []
        runs: list[list[Texts]] = []
        last: tuple[str, ...] = ()
        run: list[Texts] = []
        all_single = True
        for frag in fragments:
            if type(frag) is Frag:
                shape, texts = frag.shape, frag.texts
            else:
                shape, texts = tuple(frag), tuple(frag.values())
            if not shape:  # an empty fragment adds nothing
                continue
            if shape is last or shape == last:
                run.append(texts)
                all_single = False
            else:
                last, run = shape, [texts]
                shapes.append(shape)
                runs.append(run)
        key = (openmetrics, *shapes)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= self._limit:
                self._plans.clear()
            plan = self._plans[key] = Plan(shapes, self._order, self._headers[openmetrics])
        if all_single:  # every run one fragment (a /probe, one target): its texts are the columns themselves
            single = list(plan.head_texts)
            for (one,) in runs:
                single += one
            return "".join((*plan.pick(single), *tail))
        columns = list(plan.heads)
        for texts_of_run in runs:
            columns += zip(*texts_of_run)
        return "".join(chain(chain.from_iterable(plan.pick(columns)), tail))


__all__ = ["Frag", "Merger", "Plan", "shared_shape"]
