"""YAML from operators' files that cannot take the process down or leak what it read.

- a size cap, checked on the open file before anything is parsed;
- aliases (`*name`) refused: a 405-byte "billion laughs" file expands to gigabytes otherwise, and no
  setting of ours needs one (anchors alone are harmless and allowed);
- errors name the file and the line only: PyYAML's messages quote what they read (a tag, a token),
  and a path that is a symlink to a secret file must not print the secret.

The C parser (libyaml) is used where PyYAML has it: a first pass over its events finds aliases, the
second builds the value, both linear in the file size.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


class YamlError(ValueError):
    """One line: the file, the line and what is wrong, never the file's content."""


def read_capped(path: str, max_bytes: int, what: str) -> str:
    """The file's text, refused past `max_bytes` (the size is checked on the open file, then enforced
    while reading, so a FIFO or a growing file cannot get past it)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise YamlError(f"{what} {path}: {size:,} bytes is over the {max_bytes:,}-byte cap")
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise YamlError(f"{what} {path}: cannot read: {e.strerror or type(e).__name__}") from None
    if len(data) > max_bytes:
        raise YamlError(f"{what} {path}: over the {max_bytes:,}-byte cap")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlError(f"{what} {path}: not UTF-8 text") from None


def _problem(e: yaml.YAMLError) -> str:
    """PyYAML's problem text with anything it quoted from the file masked."""
    problem = getattr(e, "problem", None) or type(e).__name__
    return _QUOTED.sub("'…'", str(problem))


def _line(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    line = getattr(mark, "line", None)
    return f" line {line + 1}" if isinstance(line, int) else ""


def compose(text: str, where: str) -> Node | None:
    """The node tree (with line marks) of one YAML document; aliases and errors -> YamlError."""
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                line = getattr(event.start_mark, "line", -1) + 1
                raise YamlError(f"{where} line {line}: YAML aliases (*name) are not allowed")
        node: Node | None = yaml.compose(text, Loader=_Loader)
    except YamlError:
        raise
    except yaml.YAMLError as e:
        raise YamlError(f"{where}{_line(e)}: not valid YAML: {_problem(e)}") from None
    except RecursionError:
        raise YamlError(f"{where}: nested too deeply") from None
    return node


def construct(node: Node | None, where: str) -> object:
    """The Python value of a composed node (safe types only)."""
    if node is None:
        return None
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
