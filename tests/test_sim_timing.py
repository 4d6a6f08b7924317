"""Time model: the two calibrations reproduce the real H200 medians (noise-free and seeded)."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace

import pytest
from conftest import FIXTURES
from support.scenario import modelled_ttft_ms

from kvoffload_exporter.sim.calibration import FITTED_KINDS, H200_QWEN3_0_6B, H200_QWEN3_32B, REAL_TTFT_MS, Calibration
from kvoffload_exporter.sim.timing import TimeModel, expected_client_ttft_ms

TOLERANCE = 0.15


@pytest.fixture(scope="module", params=sorted(REAL_TTFT_MS))
def modelled(request: pytest.FixtureRequest) -> tuple[str, dict[tuple[str, str], float]]:
    return request.param, modelled_ttft_ms(request.param)


def test_fitted_medians_within_15_percent(modelled: tuple[str, dict[tuple[str, str], float]]) -> None:
    name, model = modelled
    for key, real in REAL_TTFT_MS[name].items():
        if key[1] in FITTED_KINDS:
            assert model[key] == pytest.approx(real, rel=TOLERANCE), (name, key)


def test_the_two_runs_reach_opposite_verdicts(modelled: tuple[str, dict[tuple[str, str], float]]) -> None:
    name, model = modelled
    delta = model[("A", "cpu_hit")] - model[("B", "recompute_no_tier")]
    real = REAL_TTFT_MS[name][("A", "cpu_hit")] - REAL_TTFT_MS[name][("B", "recompute_no_tier")]
    assert delta == pytest.approx(real, abs=0.15 * abs(real))  # +27.7 ms on 0.6B, −546.5 ms on 32B
    assert (delta > 0) == (name == "h200-qwen3-0.6b")


@pytest.mark.parametrize(
    "cal,fixture,queue_ms,engine_ttft_ms,load_ms",
    [
        (H200_QWEN3_0_6B, "h200-0.6b", 24.5, 29.3, 17.9),  # CPU-tier hit: response metrics and kv_offload_load_time
        (H200_QWEN3_32B, "h200-32b", 38.8, 42.1, 33.0),
    ],
)
def test_server_side_split_of_a_cpu_tier_hit(
    cal: Calibration, fixture: str, queue_ms: float, engine_ttft_ms: float, load_ms: float
) -> None:
    model = TimeModel(cal, noise=False)
    t = model.request(48, 5952 * cal.shape.kv_bytes_per_token, connector=True)
    assert t.queue_s * 1e3 == pytest.approx(queue_ms, rel=TOLERANCE)
    assert t.engine_ttft_s * 1e3 == pytest.approx(engine_ttft_ms, rel=TOLERANCE)
    assert t.load_s * 1e3 == pytest.approx(load_ms, rel=TOLERANCE)
    # vLLM's TTFT histogram includes the wait: the real capture's histogram sum over the hit and its
    # 4-token flush request matches queue + engine time (engine time alone is 29 % / 41 % short).
    real = json.loads((FIXTURES / fixture / "expected_deltas.json").read_text(encoding="utf-8"))
    step = real["A_04_after_pressure.prom -> A_05_after_cpu_tier_hit.prom"]
    assert step["vllm:time_to_first_token_seconds_count"] == 2.0
    modelled = t.prom_ttft_s + model.request(4, 0, connector=True).prom_ttft_s
    assert modelled == pytest.approx(step["vllm:time_to_first_token_seconds_sum"], rel=TOLERANCE)


def test_noisy_medians_with_a_fixed_seed() -> None:
    model = TimeModel(H200_QWEN3_0_6B, random.Random(42))
    samples = [model.request(48, 682_622_976, True).client_ttft_s * 1e3 for _ in range(301)]
    assert statistics.median(samples) == pytest.approx(61.9, rel=TOLERANCE)
    q = statistics.quantiles(samples, n=4)
    assert q[2] - q[0] > 3.0  # it is noisy, like the real ±5 ms
    assert min(samples) > 0


def test_noise_is_reproducible() -> None:
    def draws(seed: int) -> list[float]:
        model = TimeModel(H200_QWEN3_32B, random.Random(seed))
        return [model.request(6000, 0, True).client_ttft_s for _ in range(5)]

    a = draws(7)
    assert len(set(a)) == len(a)  # noise is drawn per request, not once per model
    assert draws(7) == a  # the same seed replays the same sequence
    assert draws(8) != a  # ... and it is the seed that does it, not a fixed draw
    assert expected_client_ttft_ms(H200_QWEN3_32B, 6000, 0, True) / 1e3 not in a


def test_slow_load_divides_the_bandwidth() -> None:
    model = TimeModel(H200_QWEN3_0_6B, noise=False)
    fast = model.request(48, 682_622_976, True)
    model.slow_load = 10
    slow = model.request(48, 682_622_976, True)
    assert slow.load_s == pytest.approx(10 * fast.load_s)
    assert slow.client_ttft_s - fast.client_ttft_s == pytest.approx(9 * fast.load_s)


def test_every_parameter_can_be_overridden() -> None:
    cal = replace(H200_QWEN3_0_6B, connector_ms=0.0, step_ms=10.0)
    assert expected_client_ttft_ms(cal, 16, 0, True) == pytest.approx(6.5 + 0.03 + 10.0 + 16 * 0.001387)
    assert expected_client_ttft_ms(H200_QWEN3_0_6B, 16, 0, True) - expected_client_ttft_ms(
        H200_QWEN3_0_6B, 16, 0, False
    ) == pytest.approx(8.0)
