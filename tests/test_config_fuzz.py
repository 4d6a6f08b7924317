"""Any YAML-shaped value as configuration gives a Config or a ConfigError, nothing else, and whatever
passes validation is usable: finite, positive timings and a listen address that splits."""

from __future__ import annotations

import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvoffload_exporter.canary.config  # noqa: F401  (registers the `canary:` section the test reads)
from kvoffload_exporter.config.settings import Config, ConfigError, from_mapping

KEYS = ["targets", "listen", "poll_interval", "window", "timeout", "max_body_bytes", "host", "gpu", "canary"]
SUB = ["url", "name", "pid", "port", "tier_bytes", "enabled", "cgroup", "interval", "strategy", "id_range"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["5m", "1e20h", ".nan", "http://a:1", "http://[::1", "127.0.0.1:99999", "auto", "", "0"]),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(SUB) | st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
documents = st.one_of(values, st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), values, max_size=5))


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_document_is_a_config_or_a_config_error(doc: object) -> None:
    try:
        cfg = from_mapping(doc)
    except ConfigError as e:
        assert e.errors and all(isinstance(m, str) and m for m in e.errors)
        return
    assert isinstance(cfg, Config)
    for v in (cfg.poll_interval, cfg.window, cfg.timeout, cfg.canary.interval):
        assert math.isfinite(v) and v > 0
    _host, port = cfg.listen_host_port
    assert 0 <= port < 65536
    assert cfg.history_len <= 100_003
    for t in cfg.targets:
        assert "@" not in t.label and (t.tier_bytes is None or math.isfinite(t.tier_bytes))
