"""Per-target caps on the work one `/metrics` body may cause (pure: config embeds it, normalise obeys it).

A hostile or broken target must not be able to pin a core or grow memory without bound, so every
poll is bounded in series kept, engines and label value length, like Prometheus's `sample_limit`
and `label_value_length_limit`. Over a cap the poll fails with a closed reason, never silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

DEFAULT_SAMPLE_LIMIT = 20_000
DEFAULT_LABEL_VALUE_LENGTH_LIMIT = 1024
DEFAULT_ENGINE_LIMIT = 64


@dataclass(frozen=True)
class Limits:
    """Caps per target. `sample_limit`: samples of the selected vLLM families kept per poll;
    `label_value_length_limit`: characters of any label value of those samples (and a line of those
    families may be at most 32 times that, checked before it is parsed); `engine_limit`: distinct
    (model_name, engine) pairs."""

    sample_limit: int = DEFAULT_SAMPLE_LIMIT
    label_value_length_limit: int = DEFAULT_LABEL_VALUE_LENGTH_LIMIT
    engine_limit: int = DEFAULT_ENGINE_LIMIT


_KEYS = ("sample_limit", "label_value_length_limit", "engine_limit")


def limits_from_mapping(raw: Any, base: Limits, where: str, errors: list[str]) -> Limits:
    """`limits:` (top level or per target) → Limits on top of `base`; problems go to `errors`."""
    if raw is None:
        return base
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping")
        return base
    changes: dict[str, int] = {}
    for k, v in raw.items():
        if k not in _KEYS:
            errors.append(f"{where}: unknown key {k!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            errors.append(f"{where}.{k}: must be a positive integer")
        else:
            changes[str(k)] = v
    return replace(base, **changes)
