"""Regular expressions matched in linear time, as Prometheus matches them (RE2): for `probe.allow_regex`.

Python's `re` backtracks: `(a+)+$` against 30 `a`s and a `!` takes seconds, and the URL it runs on comes
from whoever calls `/probe`. Here a pattern is parsed with Python's own parser (same syntax, same error
messages), compiled to a Thompson NFA and matched by simulating every state at once (a Pike VM): time
is proportional to len(text) × len(program) whatever the pattern, with no backtracking at all.

Constructs that need backtracking are refused when the pattern is loaded: backreferences, lookahead and
lookbehind, conditionals, atomic groups and possessive quantifiers, and `\\b`/`\\B`. `^` and `$` are
allowed (the whole URL must match anyway); flags other than `(?i)` are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from re import _constants as c  # type: ignore[attr-defined]  # the parser's opcodes (3.11+)
from re import _parser as sre  # type: ignore[attr-defined]
from typing import Any

MAX_PROGRAM = 5000  # instructions after expanding counted repeats: `x{1000}{1000}` is refused
MAX_TEXT = 2048  # longer texts never match (a URL that long is not a vLLM base URL)

Pred = Callable[[str], bool]
# Instructions: ("char", pred, next) | ("split", a, b) | ("begin", next) | ("end", next) | ("match",)
Inst = tuple[Any, ...]

_CATEGORIES: dict[object, Pred] = {
    c.CATEGORY_DIGIT: str.isdecimal,
    c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    c.CATEGORY_SPACE: str.isspace,
    c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    c.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
}
_REFUSED = {
    c.GROUPREF: "backreferences",
    c.GROUPREF_EXISTS: "conditionals",
    c.ASSERT: "lookahead/lookbehind",
    c.ASSERT_NOT: "lookahead/lookbehind",
}


class UnsafeRegex(ValueError):
    """The pattern is not valid, or needs a construct that can backtrack."""


def _eq(v: int) -> Pred:
    return lambda ch: ord(ch) == v


def _ne(v: int) -> Pred:
    return lambda ch: ord(ch) != v


def _range(lo: int, hi: int) -> Pred:
    return lambda ch: lo <= ord(ch) <= hi


def _set(items: list[tuple[Any, Any]]) -> Pred:
    preds: list[Pred] = []
    negate = False
    for op, av in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            preds.append(_eq(av))
        elif op is c.RANGE:
            preds.append(_range(*av))
        elif op is c.CATEGORY and av in _CATEGORIES:
            preds.append(_CATEGORIES[av])
        else:
            raise UnsafeRegex(f"unsupported character-class item {op}")
    if negate:
        return lambda ch: not any(p(ch) for p in preds)
    return lambda ch: any(p(ch) for p in preds)


class _Compiler:
    def __init__(self, ignore_case: bool) -> None:
        self.prog: list[list[Any]] = []
        self.ignore_case = ignore_case

    def emit(self, *inst: Any) -> int:
        if len(self.prog) >= MAX_PROGRAM:
            raise UnsafeRegex(f"pattern too large (over {MAX_PROGRAM} states once repeats are expanded)")
        self.prog.append(list(inst))
        return len(self.prog) - 1

    def char(self, pred: Pred) -> None:
        if self.ignore_case:
            base = pred
            pred = lambda ch: base(ch) or base(ch.lower()) or base(ch.upper())  # noqa: E731
        i = self.emit("char", pred, None)
        self.prog[i][2] = i + 1

    def seq(self, items: sre.SubPattern) -> None:
        for op, av in items:
            self.item(op, av)

    def item(self, op: Any, av: Any) -> None:  # noqa: C901 - one branch per opcode
        if op in _REFUSED:
            raise UnsafeRegex(f"{_REFUSED[op]} can backtrack: not allowed")
        if op is c.LITERAL:
            self.char(_eq(av))
        elif op is c.NOT_LITERAL:
            self.char(_ne(av))
        elif op is c.ANY:
            self.char(lambda ch: ch != "\n")
        elif op is c.IN:
            self.char(_set(av))
        elif op is c.AT:
            if av in (c.AT_BEGINNING, c.AT_BEGINNING_STRING):
                self.emit("begin", len(self.prog) + 1)
            elif av in (c.AT_END, c.AT_END_STRING):
                self.emit("end", len(self.prog) + 1)
            else:
                raise UnsafeRegex("word boundaries (\\b, \\B) are not allowed")
        elif op is c.SUBPATTERN:
            _, add, remove, sub = av
            if add or remove:
                raise UnsafeRegex("inline flags inside a group are not allowed")
            self.seq(sub)
        elif op is c.BRANCH:
            self.branch(av[1])
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            lo, hi, sub = av
            self.repeat(lo, hi, sub)
        else:
            raise UnsafeRegex(f"{str(op).lower()} is not supported")

    def branch(self, alts: list[sre.SubPattern]) -> None:
        jumps: list[int] = []
        for k, alt in enumerate(alts):
            if k < len(alts) - 1:
                split = self.emit("split", len(self.prog) + 1, None)
                self.seq(alt)
                jumps.append(self.emit("split", None, None))  # an unconditional jump: both arms the same
                self.prog[split][2] = len(self.prog)
            else:
                self.seq(alt)
        for j in jumps:
            self.prog[j][1] = self.prog[j][2] = len(self.prog)

    def repeat(self, lo: int, hi: int, sub: sre.SubPattern) -> None:
        for _ in range(lo):
            self.seq(sub)
        if hi == c.MAXREPEAT:
            split = self.emit("split", len(self.prog) + 1, None)
            self.seq(sub)
            self.emit("split", split, split)
            self.prog[split][2] = len(self.prog)
            return
        ends: list[int] = []
        for _ in range(hi - lo):
            ends.append(self.emit("split", len(self.prog) + 1, None))
            self.seq(sub)
        for e in ends:
            self.prog[e][2] = len(self.prog)


class SafeRegex:
    """`fullmatch` in O(len(text) × len(program)); the pattern is checked and compiled once."""

    def __init__(self, pattern: str) -> None:
        try:
            re.compile(pattern)
            parsed = sre.parse(pattern)
        except re.error as e:
            raise UnsafeRegex(f"not a regular expression: {e}") from None
        flags = parsed.state.flags & ~(re.UNICODE | re.IGNORECASE)
        if flags:
            raise UnsafeRegex("only the (?i) flag is allowed")
        comp = _Compiler(bool(parsed.state.flags & re.IGNORECASE))
        comp.seq(parsed)
        comp.emit("match")
        self.pattern = pattern
        self._prog: list[Inst] = [tuple(i) for i in comp.prog]

    def _closure(self, pcs: list[int], pos: int, end: int) -> list[int]:
        out: list[int] = []
        seen: set[int] = set()
        stack = list(reversed(pcs))
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            inst = self._prog[pc]
            kind = inst[0]
            if kind == "split":
                stack.extend((inst[2], inst[1]))
            elif kind == "begin":
                if pos == 0:
                    stack.append(inst[1])
            elif kind == "end":
                if pos == end:
                    stack.append(inst[1])
            else:
                out.append(pc)
        return out

    def fullmatch(self, text: str) -> bool:
        if len(text) > MAX_TEXT:
            return False
        states = self._closure([0], 0, len(text))
        for pos, ch in enumerate(text):
            nxt = [inst[2] for pc in states if (inst := self._prog[pc])[0] == "char" and inst[1](ch)]
            if not nxt:
                return False
            states = self._closure(nxt, pos + 1, len(text))
        return any(self._prog[pc][0] == "match" for pc in states)


def shortest_example(pattern: str) -> str | None:
    """Roughly the shortest string `pattern` accepts (repeats at their minimum, first branches), from the
    same parse tree; None when Python's parser refuses the pattern. For the bundle's generated tests."""
    try:
        return _example(sre.parse(pattern))
    except (re.error, RecursionError):
        return None


def _example(tree: Any) -> str:  # noqa: C901 - one branch per regex node kind
    out = []
    for op, arg in tree:
        if op is c.LITERAL:
            out.append(chr(arg))
        elif op is c.NOT_LITERAL:
            out.append("x" if chr(arg) != "x" else "y")
        elif op is c.ANY:
            out.append("x")
        elif op is c.IN:
            for kind, val in arg:
                if kind is c.LITERAL:
                    out.append(chr(val))
                    break
                if kind is c.RANGE:
                    out.append(chr(val[0]))
                    break
                if kind is c.CATEGORY:
                    out.append({c.CATEGORY_DIGIT: "0", c.CATEGORY_SPACE: " "}.get(val, "a"))
                    break
            else:
                out.append("x")
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            lo, _hi, sub = arg
            out.append(_example(sub) * lo)
        elif op is c.SUBPATTERN:
            out.append(_example(arg[-1]))
        elif op is c.BRANCH:
            out.append(_example(arg[1][0]))
        elif op is c.CATEGORY:
            out.append({c.CATEGORY_DIGIT: "0", c.CATEGORY_SPACE: " "}.get(arg, "a"))
    return "".join(out)


__all__ = ["MAX_TEXT", "SafeRegex", "UnsafeRegex", "shortest_example"]
