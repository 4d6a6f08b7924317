"""Merging fragments with C loops: one plan per run of fragment shapes, the texts moved by itemgetter and zip.

A fleet's targets send fragments of one shape (the same families, in the same order), so consecutive
fragments of one shape are read as columns at once (`zip(*map(itemgetter(*families), run))`: one
tuple per family, the run's texts in fragment order) and a plan, kept per sequence of shapes, picks the
headers and columns in catalogue order for one `"".join`. Only runs of *consecutive* fragments are
grouped, so each family's texts keep the order the fragments were given. Per merge the Python work
is one step per fragment (its shape) and one per run, not one per family of every fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

Texts = Sequence[str]
Getter = Callable[[Mapping[str, str]], Texts]


class Plan:
    """For one sequence of shapes: per run its getter, the present families' headers as columns of one
    text, and the picker of headers and columns in body order."""

    __slots__ = ("getters", "head_texts", "heads", "pick")

    def __init__(self, shapes: Sequence[tuple[str, ...]], order: Sequence[str], headers: Mapping[str, str]):
        self.getters = tuple(_getter(shape) for shape in shapes)
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


def _getter(shape: tuple[str, ...]) -> Getter:
    if len(shape) == 1:
        name = shape[0]
        return lambda frag: (frag[name],)
    return itemgetter(*shape)


class Merger:
    """`merge` with its plans (a handful per process: shapes repeat from one poll to the next), bounded."""

    def __init__(self, order: Sequence[str], headers: Mapping[bool, Mapping[str, str]], limit: int = 64):
        self._order = order
        self._headers = headers
        self._limit = limit
        self._plans: dict[tuple[Any, ...], Plan] = {}

    def __call__(self, fragments: Iterable[Mapping[str, str]], openmetrics: bool, tail: Sequence[str]) -> str:
        shapes: list[tuple[str, ...]] = []
        runs: list[list[Mapping[str, str]]] = []
        last: tuple[str, ...] = ()
        run: list[Mapping[str, str]] = []
        all_single = True
        for frag in fragments:
            shape = tuple(frag)
            if not shape:  # an empty fragment adds nothing
                continue
            if shape == last:
                run.append(frag)
                all_single = False
            else:
                last, run = shape, [frag]
                shapes.append(shape)
                runs.append(run)
        key = (openmetrics, *shapes)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= self._limit:
                self._plans.clear()
            plan = self._plans[key] = Plan(shapes, self._order, self._headers[openmetrics])
        if all_single:  # every run one fragment (a /probe, one target): its texts are the columns themselves
            texts = list(plan.head_texts)
            for get, (frag,) in zip(plan.getters, runs):
                texts += get(frag)
            return "".join((*plan.pick(texts), *tail))
        columns = list(plan.heads)
        for get, frags in zip(plan.getters, runs):
            columns += zip(*map(get, frags))
        return "".join(chain(chain.from_iterable(plan.pick(columns)), tail))


__all__ = ["Merger", "Plan"]
