"""Test support: exposition bodies derived from a real capture."""

from __future__ import annotations


def two_engines(text: str) -> str:
    """`text` with every engine "0" series repeated for engine "1", its values doubled (still cumulative)."""
    more = [
        f"{line.rpartition(' ')[0]} {2 * float(line.rpartition(' ')[2])!r}".replace('engine="0"', 'engine="1"')
        for line in text.splitlines()
        if 'engine="0"' in line and not line.startswith("#")
    ]
    return text + "\n".join(more) + "\n"
