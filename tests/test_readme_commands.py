"""Every command the README shows, run here as the README shows it, and its claim checked: the code blocks, the
inline `kvoffload-exporter …` commands and the promtool and bench lines. Only the addresses change (a free local
port for `127.0.0.1:8000`, `0.0.0.0:9466`, `vllm:8000`; a simulator stands in for vLLM), the files land in a
temporary directory, and `check` settles 0.02 s instead of 0.5 s around each probe. A command that cannot run here says why in COVERED; a new command in the README fails
`test_every_readme_command_is_run_here_or_says_why_not` until it is added there."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from kvoffload_exporter.cli import _parsers, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FIXTURES = ROOT / "tests" / "fixtures"
PROMTOOL = shutil.which("promtool")
RUNS = "run here by this file"
WHOLE_SUITE = "not run here: it is the whole test suite (minutes; the lead runs it), of which this file is part"

COVERED: dict[str, str] = {
    # The quick start.
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/kvoffload-exporter demo": RUNS
    + " (the demo; the venv and the install are this test run's own)",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest": WHOLE_SUITE,
    # serve
    "kvoffload-exporter serve --target http://127.0.0.1:8000 --web.listen-address 0.0.0.0:9466": RUNS,
    "curl -s 127.0.0.1:9466/metrics | grep kvoffload_state": RUNS,
    "kvoffload-exporter inspect before.prom after.prom": RUNS,
    "curl -s http://vllm:8000/metrics | kvoffload-exporter inspect before.prom -": RUNS,
    "kvoffload-exporter check --target http://vllm:8000 --control-target http://vllm-no-offload:8000 --rounds 10 "
    "--allow-pressure --json check.json --out evidence/": RUNS,
    "kvoffload-exporter bundle --out DIR --selector job=my-vllm": RUNS,
    "promtool test rules DIR/alerts/tests/*.yaml": RUNS + " where promtool is installed",
    "python bench/pipeline.py --readme": RUNS,
    "python bench/pipeline.py --json": "not run here: a benchmark of five timed runs on a shared machine; its "
    "README row is checked through --readme",
    '.venv/bin/python -m pytest -m "not e2e"': WHOLE_SUITE,
    ".venv/bin/python -m pytest tests/e2e -m e2e": "not run here: needs the real vLLM CPU venv "
    "(bash tests/e2e/setup_vllm_cpu.sh)",
    # The command table's synopses and the bare command names: every flag exists (test_the_command_table).
    "kvoffload-exporter serve --target URL [--target URL …] --web.listen-address HOST:PORT [--poll.interval S] "
    "[--state.window 5m] [--config.file FILE] [--config.check]": RUNS,
    "kvoffload-exporter inspect FILE [FILE2] [--json]": RUNS,
    "kvoffload-exporter check --target URL [--control-target URL] [--rounds N] [--allow-pressure] "
    "[--concurrency 1,4,16] [--json F] [--out DIR]": RUNS,
    "kvoffload-exporter simulate --listen HOST:PORT [--vllm-version V] [--calibration NAME] [--fault F …]": RUNS,
    "kvoffload-exporter bundle --out DIR [--selector LABEL=VALUE …]": RUNS,
    "kvoffload-exporter demo": RUNS,
    "kvoffload-exporter check": RUNS,
    "kvoffload-exporter simulate": RUNS,
}


def readme_commands() -> list[str]:
    """Each line of a bash block (continuations joined, comments cut), each `$ ` line of a console block, and
    each inline code span that starts with a command of this project, promtool or its bench."""
    found = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", README, re.S):
        if lang == "bash":
            for line in body.replace("\\\n", " ").splitlines():
                line = " ".join(line.split("#", 1)[0].split()) if "# " in line else " ".join(line.split())
                if line:
                    found.append(line)
        elif lang == "console":
            found += [" ".join(x[2:].split()) for x in body.splitlines() if x.startswith("$ ")]
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        if re.match(r"(kvoffload-exporter [a-z]|promtool test rules DIR|python bench/|curl -s http)", span):
            found.append(span)
    return list(dict.fromkeys(found))


def test_every_readme_command_is_run_here_or_says_why_not() -> None:
    shown = readme_commands()
    assert set(shown) == set(COVERED), {"not covered": set(shown) - set(COVERED), "gone": set(COVERED) - set(shown)}


def test_the_command_table_names_real_commands_and_flags() -> None:
    """Every synopsis of the Commands table: the command exists, and so does every flag it shows."""
    parsers = {p.prog.split()[-1]: p for p in _parsers(build_parser()) if " " in p.prog}
    rows = re.findall(r"^\| `kvoffload-exporter (\w+)([^`]*)` \|", README, re.M)
    assert {name for name, _ in rows} == {"serve", "inspect", "check", "simulate", "demo", "bundle"}
    for name, synopsis in rows:
        options = {o for a in parsers[name]._actions for o in a.option_strings}
        for flag in re.findall(r"--[a-z][\w.-]*", synopsis):
            assert flag in options, f"{name} {flag}"


# ------------------------------------------------------------------------------------------------ processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _process(*argv: str, cwd: Path = ROOT) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, "-m", "kvoffload_exporter", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
    )
    try:
        yield p
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


def _line(p: subprocess.Popen[str], text: str) -> str:
    assert p.stdout is not None
    seen = []
    for line in p.stdout:
        seen.append(line)
        if text in line:
            return line
    pytest.fail(f"ended before {text!r}: {''.join(seen)}")


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as st:
        yield st


def _simulator(stack: ExitStack, *extra: str) -> str:
    """A simulator standing in for vLLM (time scale 0.2), stopped with Ctrl-C when the test ends."""
    p = stack.enter_context(_process("simulate", "--listen", "127.0.0.1:0", "--time-scale", "0.2", *extra))
    match = re.search(r" on (http://\S+)", _line(p, "serving Qwen/"))
    assert match is not None
    return match[1]


def _cli(*argv: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


# ------------------------------------------------------------------------------------------------ commands


def test_demo_prints_urls_and_state_lines_and_stops_on_ctrl_c_with_a_summary() -> None:
    """README: "prints the URLs and a live state line per engine; Ctrl-C stops it (exit 0, after a traffic
    summary)". Its exporter port is a free one instead of 9466."""
    with _process("demo", "--listen", "127.0.0.1:0", "--status-interval", "0.5") as p:
        first = _line(p, "http://")
        _line(p, "engine 0: state")
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "traffic:" in rest and "Traceback" not in rest, first + rest


def test_serve_and_curl_show_the_state(stack: ExitStack) -> None:
    """The serve block: the exporter polls the target and `/metrics` carries `kvoffload_state` (after its
    second poll: no state before data)."""
    target = _simulator(stack)
    port = _free_port()
    with _process("serve", "--target", target, "--web.listen-address", f"127.0.0.1:{port}") as p:
        _line(p, "listening on http://")
        body = ""
        for _ in range(300):  # until the second poll has landed; the default interval is 5 s
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                body = r.read().decode()
            if "kvoffload_state{" in body:
                break
            time.sleep(0.2)
    states = [line for line in body.splitlines() if line.startswith("kvoffload_state{")]  # `| grep kvoffload_state`
    assert states and any(line.endswith(" 1") or line.endswith(" 1.0") for line in states), body[-2000:]


def test_the_yaml_configuration_validates_with_config_check(tmp_path: Path) -> None:
    """The YAML block is a valid configuration (`--config.check` lists every error at once): with its password
    file present it passes; without it, one line names the file."""
    text = re.search(r"```yaml\n(.*?)```", README, re.S)
    assert text is not None
    conf = tmp_path / "exporter.yaml"
    conf.write_text(text[1])
    missing = _cli("serve", "--config.file", str(conf), "--config.check")
    assert missing.returncode == 2 and "password_file /run/secrets/vllm-password" in missing.stderr
    secret = tmp_path / "vllm-password"
    secret.write_text("s3cret-pw\n")  # credentials under 8 characters are refused at load
    secret.chmod(0o600)
    conf.write_text(text[1].replace("/run/secrets/vllm-password", str(secret)))
    ok = _cli("serve", "--config.file", str(conf), "--config.check")
    assert ok.returncode == 0, ok.stderr


def test_inspect_prints_the_interval_the_readme_shows(tmp_path: Path) -> None:
    chain = FIXTURES / "h200-0.6b"
    shutil.copy(chain / "A_04_after_pressure.prom", tmp_path / "before.prom")
    shutil.copy(chain / "A_05_after_cpu_tier_hit.prom", tmp_path / "after.prom")
    out = _cli("inspect", "before.prom", "after.prom", cwd=tmp_path)
    shown = re.search(r"```console\n\$ [^\n]*\n(.*?)```", README, re.S)
    assert out.returncode == 0 and shown is not None
    for want, got in zip(shown[1].splitlines(), out.stdout.splitlines()):
        cut = want.rstrip(". ")  # the README cuts its long lines with "..."
        assert " ".join(got.split()).startswith(" ".join(cut.split())), (want, got)
    piped = _cli(
        "inspect", "before.prom", "-", stdin=(chain / "A_05_after_cpu_tier_hit.prom").read_text(), cwd=tmp_path
    )
    assert piped.returncode == 0 and piped.stdout == out.stdout  # `curl … | kvoffload-exporter inspect before.prom -`


def test_check_writes_its_verdict_and_evidence_and_exits_by_its_advice(tmp_path: Path, stack: ExitStack) -> None:
    """The check block against a simulator with the connector and one without (the control), at time scale 0.2;
    README: the exit code follows the run's one advice, the report prints exactly one advice line."""
    from kvoffload_exporter.canary.check.advice import EXIT_CODES, Action

    target, control = _simulator(stack), _simulator(stack, "--no-connector")
    argv = ["check", "--target", target, "--control-target", control, "--rounds", "10", "--allow-pressure"]
    argv += ["--settle", "0.02"]  # a simulator reports its stores at once: the default 0.5 s waits make it 80 s
    out = _cli(*argv, "--json", "check.json", "--out", "evidence/", "--secret-file", str(tmp_path / "s"), cwd=tmp_path)
    doc = json.loads((tmp_path / "check.json").read_text())
    assert out.returncode == doc["exit_code"] == EXIT_CODES[Action(doc["advice"]["action"])], out.stderr[-2000:]
    assert doc["verdict"] in ("offload_slower", "offload_faster", "inconclusive"), doc["why"]
    for name in ("report.json", "report.txt", "requests.jsonl", "ttft.png", "target_metrics_before.prom"):
        assert (tmp_path / "evidence" / name).is_file(), name
    assert out.stdout.count("advice: ") == 1 and "rank-sum CI ms" in out.stdout


def test_bundle_for_your_labels_and_its_promtool_tests(tmp_path: Path) -> None:
    pytest.importorskip("grafanalib")
    out = _cli("bundle", "--out", str(tmp_path / "DIR"), "--selector", "job=my-vllm")
    assert out.returncode == 0, out.stderr
    rules = (tmp_path / "DIR/alerts/kvoffload.rules.yaml").read_text()
    assert 'job="my-vllm"' in rules and (tmp_path / "DIR/alerts/runbook.md").is_file()
    if PROMTOOL is None:
        return  # the rendered tests run in tests/test_rendered_rule_tests.py where promtool is installed
    tests = sorted(str(p) for p in (tmp_path / "DIR/alerts/tests").glob("*.yaml"))
    run = subprocess.run([PROMTOOL, "test", "rules", *tests], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_the_bench_row_is_the_readmes() -> None:
    out = subprocess.run(
        [sys.executable, "bench/pipeline.py", "--readme"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    row = out.stdout.strip().splitlines()[-1]
    assert row.startswith("| ") and row in README
