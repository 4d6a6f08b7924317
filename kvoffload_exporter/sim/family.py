"""One row of the simulator's vLLM exposition table: when vLLM has a family, its type, HELP and children.

`sim.families` holds the rows, `sim.profiles` writes them for a version and a set of engines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kvoffload_exporter.sim.engine import EngineConfig
from kvoffload_exporter.sim.stats import EngineStats, LabelValues
from kvoffload_exporter.sim.versions import Version

Children = Callable[[Version], "tuple[LabelValues, ...] | None"]


class EngineView(Protocol):
    index: int
    cfg: EngineConfig
    connector: bool
    stepped: bool
    stats: EngineStats


def _always(v: Version) -> tuple[LabelValues, ...]:
    return ((),)


@dataclass(frozen=True)
class Family:
    name: str  # without the `vllm:` prefix and without `_total`
    kind: str  # counter | gauge | histogram | info
    help: str
    labels: tuple[str, ...] = ()  # labels besides model_name and engine
    children: Children = _always
    since: Version = (0, 10)
    until: Version = (99, 0)  # last version that shows it by default
    hidden_until: Version | None = None  # deprecated: shown up to here with --show-hidden-metrics-for-version
    needs_connector: bool = False
    generation: str = ""  # "flat" | "legacy": dropped by the `rename` fault's variants
    source: str = ""  # stats key when it differs from `name`
    per_engine: bool = True
    help_changes: tuple[tuple[Version, str], ...] = ()

    def present(self, v: Version, variant: str | None, show_hidden: bool = False) -> bool:
        last = self.hidden_until if show_hidden and self.hidden_until else self.until
        if not self.since <= v <= last:
            return False
        return not (
            (variant == "flat-only" and self.generation == "legacy")
            or (variant == "legacy-only" and self.generation == "flat")
        )

    def help_for(self, v: Version) -> str:
        text = self.help
        for since, changed in self.help_changes:
            if v >= since:
                text = changed
        return text

    @property
    def key(self) -> str:
        return self.source or self.name
