"""YAML from operators' files that cannot take the process down or leak what it read.

- regular files only, a size cap checked on the open file before anything is parsed;
- duplicate keys refused (YAML keeps the last silently; Prometheus refuses them too);
- aliases (`*name`) refused: a 405-byte "billion laughs" file expands to gigabytes otherwise, and no
  setting of ours needs one (anchors alone are harmless and allowed);
- errors name the file and the line only: PyYAML's messages quote what they read (a tag, a token),
  and a path that is a symlink to a secret file must not print the secret.

The C parser (libyaml) is used where PyYAML has it: a first pass over its events finds aliases, the
second builds the value, both linear in the file size.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kvoffload_exporter.saferead import FileRefused, read_regular

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_SHOWABLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,39}")  # a setting's name; anything else is not echoed


class YamlError(ValueError):
    """One line: the file, the line and what is wrong, never the file's content."""


def read_capped(path: str, max_bytes: int, what: str) -> str:
    """The file's text, refused past `max_bytes` or when it is not a regular file (a FIFO is refused
    unopened, never waited on: kvoffload_exporter.saferead)."""
    try:
        data = read_regular(path, max_bytes)
    except FileRefused as e:
        why = f": cannot read: {e.strerror}" if e.strerror else f" {e}"
        raise YamlError(f"{what} {path}{why}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlError(f"{what} {path}: not UTF-8 text") from None


def _problem(e: yaml.YAMLError) -> str:
    """PyYAML's own words ("did not find expected ',' or ']'", "expected <block end>, but found …"), with
    anything longer it quoted from the file masked: a token the parser expects (`','`, `<block end>`) is
    its grammar, a longer quote may be the file's content (a secret)."""
    problem = getattr(e, "problem", None) or type(e).__name__
    return _QUOTED.sub(lambda m: m.group(0) if len(m.group(0)) <= 4 else "'…'", str(problem))


def _line(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    line, column = getattr(mark, "line", None), getattr(mark, "column", None)
    if not isinstance(line, int):
        return ""
    return f" line {line + 1}" + (f" column {column + 1}" if isinstance(column, int) else "")


def compose(text: str, where: str) -> Node | None:
    """The node tree (with line marks) of one YAML document; aliases and errors -> YamlError."""
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                line = getattr(event.start_mark, "line", -1) + 1
                raise YamlError(f"{where} line {line}: YAML aliases (*name) are not allowed")
        node: Node | None = yaml.compose(text, Loader=_Loader)
        _refuse_duplicate_keys(node, where)
    except YamlError:
        raise
    except yaml.YAMLError as e:
        raise YamlError(f"{where}{_line(e)}: not valid YAML: {_problem(e)}") from None
    except RecursionError:
        raise YamlError(f"{where}: nested too deeply") from None
    return node


def _refuse_duplicate_keys(node: Node | None, where: str) -> None:
    """A key twice in one mapping is refused, as Prometheus refuses it: YAML would keep the last one
    silently (`targets:` twice drops the first list). Walked without recursion: depth is the file's."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, MappingNode):
            seen: dict[str, int] = {}
            for k, v in _with_merged(n.value):
                if isinstance(k, ScalarNode):
                    line = k.start_mark.line + 1
                    if k.value in seen:
                        shown = f" {k.value!r}" if _SHOWABLE_KEY.fullmatch(k.value) else ""
                        raise YamlError(f"{where} line {line}: duplicate key{shown} (first on line {seen[k.value]})")
                    seen[k.value] = line
                stack += (k, v)
        elif isinstance(n, SequenceNode):
            stack += n.value


def _with_merged(pairs: list[tuple[Node, Node]]) -> list[tuple[Node, Node]]:
    """A mapping's pairs with those of a YAML merge key (`<<: {targets: ...}`) among them: a key merged in
    and written again is as much a duplicate as one written twice (the merged one would be dropped)."""
    out: list[tuple[Node, Node]] = []
    for k, v in pairs:
        if isinstance(k, ScalarNode) and k.tag == "tag:yaml.org,2002:merge":
            merged = v.value if isinstance(v, SequenceNode) else [v]
            out += [p for m in merged if isinstance(m, MappingNode) for p in m.value]
        else:
            out.append((k, v))
    return out


_MAX_DIGITS = 4000
"""Python refuses to read an integer of more than 4,300 digits (sys.get_int_max_str_digits)."""


def _long_number(node: Node | None) -> int | None:
    """The line of an integer scalar too long to read, else None (walked without recursion)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ScalarNode) and len(n.value) > _MAX_DIGITS and n.tag == "tag:yaml.org,2002:int":
            return int(n.start_mark.line) + 1
        if isinstance(n, MappingNode):
            stack += [x for pair in n.value for x in pair]
        elif isinstance(n, SequenceNode):
            stack += n.value
    return None


def construct(node: Node | None, where: str) -> object:
    """The Python value of a composed node (safe types only)."""
    if node is None:
        return None
    line = _long_number(node)
    if line is not None:
        raise YamlError(f"{where} line {line}: a number of more than {_MAX_DIGITS} digits")
    loader = _Loader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise YamlError(f"{where}{_line(e)}: not valid YAML: {_problem(e)}") from None
    except RecursionError:
        raise YamlError(f"{where}: nested too deeply") from None
    finally:
        loader.dispose()


def load(path: str, max_bytes: int, what: str) -> object:
    """Read, cap, refuse aliases, parse: the value of the file's one document."""
    return construct(compose(read_capped(path, max_bytes, what), f"{what} {path}"), f"{what} {path}")


def key_lines(node: Node | None, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key, by its path of keys: errors point at a line, not a value."""
    out: dict[tuple[str, ...], int] = {}
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if isinstance(k, ScalarNode):
                path = (*prefix, str(k.value))
                out[path] = k.start_mark.line + 1
                out.update(key_lines(v, path))
    elif isinstance(node, SequenceNode):
        for i, v in enumerate(node.value):
            out.update(key_lines(v, (*prefix, str(i))))
    return out


__all__ = ["YamlError", "compose", "construct", "key_lines", "load", "read_capped"]
