"""Alerting and recording rules, defined once: rendered as Prometheus rule YAML (`rulefile`) and as Grafana alerts.

Every expression is built from catalogue names through `Query` with the user's selectors. Counters are
only ever read through `increase()`, so a restarted exporter or engine (a counter reset) never looks
like traffic. Alert expressions return series only while the condition holds, which lets the Grafana
translation use one "is there a value" condition for every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvoffload_exporter.bundle.alerting import fleet_rules
from kvoffload_exporter.bundle.alerting.alertgroups import ENGINE_EXTRA, GROUPS, Terms
from kvoffload_exporter.bundle.alerting.promql import Matcher, Query
from kvoffload_exporter.bundle.alerting.promql import matcher as _m
from kvoffload_exporter.bundle.alerting.ruletypes import AlertRule, RecordingRule
from kvoffload_exporter.bundle.settings import DEFAULT, Settings
from kvoffload_exporter.catalogue import STATES, evidence_metric
from kvoffload_exporter.ingest.backends.resolve import SIGNAL_UNITS
from kvoffload_exporter.ingest.backends.schema import Evidence, NativeUnit


class _Rules:
    """Builds both rule kinds. `inline=True` expands recorded series (Grafana has no recording rules)."""

    def __init__(self, s: Settings, selectors: Sequence[Matcher], inline: bool):
        self.s = s
        self.q = Query(tuple(selectors))
        self.inline = inline
        w = s.reuse_window
        self._records: dict[str, Callable[[str], str]] = {
            f"engine:kvoffload_store_bytes:increase{w}": lambda off: (
                f"increase({self.q('kvoffload_store_bytes_total')}[{w}]{off})"
            ),
            f"engine:kvoffload_load_bytes:increase{w}": lambda off: (
                f"increase({self.q('kvoffload_load_bytes_total')}[{w}]{off})"
            ),
            # Reuse is visible when prompts are served from a prefix cache (GPU or external). The `or`
            # chain keeps the rule alive on a vLLM that exports only one of the two counters.
            f"engine:kvoffload_prefix_hits_tokens:increase{w}": lambda off: (
                f"(increase({self.q('kvoffload_gpu_prefix_hits_tokens_total')}[{w}]{off})"
                f" + increase({self.q('kvoffload_external_prefix_hits_tokens_total')}[{w}]{off}))"
                f" or increase({self.q('kvoffload_gpu_prefix_hits_tokens_total')}[{w}]{off})"
                f" or increase({self.q('kvoffload_external_prefix_hits_tokens_total')}[{w}]{off})"
            ),
            # Backends that count no bytes (SimpleCPU/KVBM blocks, LMCache tokens, chunks): the increase
            # per unit, never summed across units (kvoffload_exporter.ingest.backends); loads in any unit.
            f"engine:kvoffload_backend_stored_units:increase{w}": lambda off: (
                f"max without (tier, connector) ({self.per_unit(Evidence.STORED, f'[{w}]{off}', bytes_too=False)})"
            ),
            f"engine:kvoffload_backend_loaded_units:increase{w}": lambda off: (
                f"max without (unit, tier, connector) ({self.per_unit(Evidence.LOADED, f'[{w}]{off}')})"
            ),
            # For routers and autoscalers: what each server's caches hold (GPU pool + offload tier) summed over
            # its engines (data-parallel ranks), from the first poll (vllm#51615, llm-d-router#1650).
            "target:kvoffload_effective_kv_capacity_tokens:sum": lambda off: (
                f"sum without (engine) ({self.q('kvoffload_effective_kv_capacity_tokens')}{off})"
            ),
            f"engine:kvoffload_ttft_seconds:avg{s.ttft_smoothing}": lambda off: (
                f"avg_over_time({self.q('kvoffload_ttft_seconds', _m('quantile', '=', s.ttft_quantile))}"
                f"[{s.ttft_smoothing}]{off})"
            ),
        }

    def per_unit(self, signal: Evidence, rng: str, *matchers: str, bytes_too: bool = True) -> str:
        """`increase` of every unit's family of `signal` (kvoffload_backend_<signal>_<unit>_total), one series per
        unit: the unit goes back into a `unit` label so that families with equal labels stay apart (and an
        alert can name it); callers never add across it."""
        units = [u for u in SIGNAL_UNITS[signal] if bytes_too or u != NativeUnit.BYTES]
        return " or ".join(
            f'label_replace(increase({self.q(evidence_metric(signal, u), *matchers)}{rng}), "unit", "{u}", "", "")'
            for u in units
        )

    def rec(self, name: str, offset: str = "") -> str:
        off = f" offset {offset}" if offset else ""
        if self.inline:
            return f"({self._records[name](off)})"
        if name not in self._records:
            raise KeyError(name)
        return f"{name}{off}"

    def recording_rules(self) -> list[RecordingRule]:
        return [RecordingRule(name, fn("")) for name, fn in self._records.items()]

    def terms(self) -> Terms:
        """The pieces every alert group shares: recorded increases, joins, the engine's name in a message."""
        s, q, w = self.s, self.q, self.s.reuse_window
        store = self.rec(f"engine:kvoffload_store_bytes:increase{w}")
        load = self.rec(f"engine:kvoffload_load_bytes:increase{w}")
        reuse = self.rec(f"engine:kvoffload_prefix_hits_tokens:increase{w}")
        stored_units = self.rec(f"engine:kvoffload_backend_stored_units:increase{w}")
        loaded_units = self.rec(f"engine:kvoffload_backend_loaded_units:increase{w}")
        ttft_name = f"engine:kvoffload_ttft_seconds:avg{s.ttft_smoothing}"
        drop_window = f"[{s.allocation_window}]"
        ttft, ttft_base = self.rec(ttft_name), self.rec(ttft_name, s.ttft_baseline_offset)
        ign = f"ignoring ({', '.join(ENGINE_EXTRA)})"
        configured = f"({q('kvoffload_state', _m('state', '=', 'not_configured'))} == 0)"
        control = f"({q('kvoffload_state', _m('state', '=', 'not_configured'))} == 1)"
        engine = "{{ $labels.target }} {{ $labels.model_name }} engine {{ $labels.engine }}"
        busy = _m("load_band", "!=", "idle")  # idle is KVOffloadSlowerThanRecompute's
        canary_ok = (
            "sum without (result) (increase("
            f"{q('kvoffload_canary_probes_total', _m('result', '!=', 'error'))}[{s.canary_window}])) > 0"
        )
        canary_err = (
            "sum without (result) (increase("
            f"{q('kvoffload_canary_probes_total', _m('result', '=', 'error'))}[{s.canary_window}])) > 0"
        )
        return Terms(
            s,
            q,
            w,
            self.per_unit,
            store=store,
            load=load,
            reuse=reuse,
            stored_units=stored_units,
            loaded_units=loaded_units,
            drop_window=drop_window,
            ttft=ttft,
            ttft_base=ttft_base,
            ign=ign,
            configured=configured,
            control=control,
            engine=engine,
            busy=busy,
            canary_ok=canary_ok,
            canary_err=canary_err,
        )

    def alerts(self) -> list[AlertRule]:
        """Every alert, one group after another (bundle/alerting/alertgroups.py: one builder per group)."""
        t = self.terms()
        return [alert for group in GROUPS for alert in group(t)]


def build(
    s: Settings = DEFAULT, selectors: Sequence[Matcher] = (), inline: bool = False
) -> tuple[list[RecordingRule], list[AlertRule]]:
    r = _Rules(s, selectors, inline)
    return ([] if inline else r.recording_rules()), r.alerts() + fleet_rules.alerts(s, selectors)


__all__ = ["STATES", "AlertRule", "RecordingRule", "build"]
