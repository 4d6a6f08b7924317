"""Per-target caps on the work one `/metrics` body may cause (pure: config embeds it, normalise obeys it).

A hostile or broken target must not be able to pin a core or grow memory without bound, so every
poll is bounded in series kept, engines and label value length, like Prometheus's `sample_limit`
and `label_value_length_limit`. Over a cap the poll fails with a closed reason, never silently.
Declared like every other setting (kvoffload_exporter.config.schema): `limits:` at the top level and per target,
`--limits.*` flags and `KVOFFLOAD_LIMITS_*` variables for the top-level ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvoffload_exporter.config.schema import Where, apply, integer, parse_section, setting

DEFAULT_SAMPLE_LIMIT = 20_000
DEFAULT_LABEL_VALUE_LENGTH_LIMIT = 1024
DEFAULT_ENGINE_LIMIT = 64

_integer = integer(lo=1)


def _positive(v: object, text: bool) -> object:
    """A cap of 0 or less would fail every poll: one message for every way of getting it wrong."""
    try:
        return _integer(v, text)
    except ValueError:
        raise ValueError("must be a positive integer") from None


@dataclass(frozen=True)
class Limits:
    """Caps per target. A line of the selected families may be at most 32 times
    `label_value_length_limit`, checked before it is parsed."""

    sample_limit: int = setting(
        DEFAULT_SAMPLE_LIMIT,
        _positive,
        "samples of the selected vLLM families kept per poll (over it the poll fails: sample_limit)",
        flag="--limits.sample-limit",
        metavar="N",
    )
    label_value_length_limit: int = setting(
        DEFAULT_LABEL_VALUE_LENGTH_LIMIT,
        _positive,
        "characters of any label value of those samples",
        flag="--limits.label-value-length-limit",
        metavar="N",
    )
    engine_limit: int = setting(
        DEFAULT_ENGINE_LIMIT,
        _positive,
        "distinct (model_name, engine) pairs per target",
        flag="--limits.engine-limit",
        metavar="N",
    )


def limits_from_mapping(raw: object, base: Limits, where: str, errors: list[str]) -> Limits:
    """`limits:` (top level or per target) → Limits on top of `base`; problems go to `errors`."""
    if raw is None:
        return base
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping")
        return base
    return apply(base, parse_section(Limits, raw, Where(where), errors))
