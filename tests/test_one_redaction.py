"""Hardening, fourth pass: one redaction for the whole program.

Every secret the process knows (target credentials, the canary's API key) in every documented spelling,
case-insensitive and NFKC-normalised, is removed at every exit: the exposition, the landing page and the
logs, including the warning a `/version` redirect gives (scrubbed, within the log budget). A credential
too short to be removed safely is refused at load."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text
from support.polls import metrics_after_polls

from kvoffload_exporter.canary.wire.secrets import ApiKey, SecretError, load_api_key
from kvoffload_exporter.config.credentials import BasicAuth, BearerToken
from kvoffload_exporter.config.schema import ConfigError
from kvoffload_exporter.config.settings import Config, TargetConfig, from_mapping
from kvoffload_exporter.redact import REDACTED, Scrubber, register, scrub
from kvoffload_exporter.server import logs
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.logbudget import LogBudget
from kvoffload_exporter.server.targetpoller import TargetPoller

GOOD = fixture_text("h200-0.6b/A_12_final.prom")
EARLY = fixture_text("h200-0.6b/A_03_after_gpu_hit.prom")
CANARY_KEY = "sk-canary-44-Zq8/Xw+v"
TOKEN = "tok-44-9f8e7d6c5b4a"
USER, PASSWORD = "admin", "Hunter2/Pw44"
PAIR = f"{USER}:{PASSWORD}"


def _mime(data: bytes) -> str:
    """base64 wrapped in 76-character lines, as MIME writes it."""
    text = base64.b64encode(data).decode()
    return "\r\n".join(text[i : i + 76] for i in range(0, len(text), 76))


SPELLINGS = {
    "lower-case percent": lambda s: quote(s, safe="").lower(),
    "every byte percent-encoded": lambda s: "".join(f"%{b:02X}" for b in s.encode()),
    "every byte, lower-case hex": lambda s: "".join(f"%{b:02x}" for b in s.encode()),
    "double percent-encoding": lambda s: quote(quote(s, safe=""), safe=""),
    "mixed-case hex": lambda s: "".join(c.upper() if i % 2 else c for i, c in enumerate(s.encode().hex())),
    "json with escaped slash": lambda s: json.dumps({"k": s}).replace("/", "\\/"),
    "json every character escaped": lambda s: "".join(f"\\u{ord(c):04x}" for c in s),
    "mime-wrapped base64": lambda s: _mime(b"x" * 70 + s.encode() + b"y" * 40),
    "upper case": str.upper,
    "python bytes repr": lambda s: repr(s.encode() + b"\xff"),
    "every byte as \\x": lambda s: "".join(f"\\x{b:02x}" for b in s.encode()),
    "fullwidth": lambda s: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s),
}


def _gone(secret: str, text: str) -> bool:
    """Neither the secret nor any spelling of it that the input used is left."""
    low = text.lower()
    return all(f(secret).lower() not in low for f in SPELLINGS.values() if "\n" not in f(secret)) and (
        base64.b64encode(secret.encode()).decode()[:8] not in text.replace("\r\n", "")
        or REDACTED in text  # the run around it is redacted: the prefix alone is no secret
    )


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("secret", [TOKEN, PAIR, PASSWORD, CANARY_KEY, "pässwörd-44"])
def test_every_documented_spelling_is_scrubbed(spelling: str, secret: str) -> None:
    s = Scrubber([secret])
    hostile = f"model {SPELLINGS[spelling](secret)} end"
    out = s(hostile)
    assert REDACTED in out, (spelling, out)
    if spelling == "mime-wrapped base64":  # what is left decodes to no part of the secret of 6 bytes or more
        assert secret.encode() not in base64.b64decode(_mime_rest(out) + "==")
    else:
        assert SPELLINGS[spelling](secret).lower() not in out.lower()


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_is_scrubbed_by_the_process_wide_scrubber_of_many_secrets(spelling: str) -> None:
    """The scrubber of every known secret (1,000 targets: ~21,000 forms) looks forms up by prefix."""
    s = Scrubber([*(f"filler-secret-{i:04d}" for i in range(100)), PAIR])
    assert len(s.forms) > 512
    out = s(f"model {SPELLINGS[spelling](PAIR)} end")
    assert REDACTED in out, (spelling, out)


def _mime_rest(out: str) -> str:
    return out.replace("\r\n", "").replace(REDACTED, "")


def test_a_short_secret_never_rewrites_ordinary_data() -> None:
    assert Scrubber(["Qwen3"])("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # under MIN_SECRET: refused at load


@pytest.mark.parametrize(
    "raw",
    [
        {"targets": ["http://u:Qwen3@h:1"]},
        {"targets": [{"url": "http://h:1", "extra_metrics_urls": ["http://u:Qwen3@h:2/metrics"]}]},
    ],
)
def test_a_credential_too_short_to_scrub_is_refused_at_load(raw: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="5 characters, fewer than 8: too short to be removed safely"):
        from_mapping(raw)


def test_a_short_password_or_token_file_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("Qwen3\n")
    with pytest.raises(ConfigError, match="password has 5 characters"):
        from_mapping({"targets": [{"url": "http://h:1", "username": "u", "password_file": str(tmp_path / "pw")}]})
    (tmp_path / "tok").write_text("abc\n")
    with pytest.raises(ConfigError, match="bearer token has 3 characters"):
        from_mapping({"targets": [{"url": "http://h:1", "bearer_token_file": str(tmp_path / "tok")}]})


def test_a_short_canary_key_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVOFFLOAD_API_KEY", "Qwen3")
    with pytest.raises(SecretError, match="KVOFFLOAD_API_KEY holds a key of 5 characters"):
        load_api_key(None)


def test_a_serve_with_a_short_credential_exits_with_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("listen: 127.0.0.1:0\ntargets: ['http://u:Qwen3@127.0.0.1:1']\n")
    cmd = [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(conf)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # a bound, not a timing
    assert done.returncode != 0
    assert "too short to be removed safely" in done.stderr and "Traceback" not in done.stderr
    assert "Qwen3" not in done.stderr


@pytest.mark.parametrize("formatter", [logs.TextFormatter(), logs.LogfmtFormatter(), logs.JsonFormatter()])
def test_every_log_line_passes_the_one_redaction(formatter: logging.Formatter) -> None:
    register("log-secret-44-abcdef")
    rec = logging.LogRecord("kvoffload.x", logging.WARNING, __file__, 1, "said %s", ("LOG-SECRET-44-ABCDEF",), None)
    rec.error = quote("log-secret-44-abcdef", safe="").lower()
    line = formatter.format(rec)
    assert "secret-44" not in line.lower() and REDACTED in line
    assert scrub("Authorization: Bearer whatever-it-is") == f"Authorization: Bearer {REDACTED}"


class Echo:
    """A vLLM that puts `said` into `model_name`; `/version` answers `version` (a handler)."""

    def __init__(self, said: str, version: web.Response | None = None) -> None:
        self.said, self.version = said, version
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/version":
            return self.version or web.json_response({"version": "0.26.0"})
        return web.Response(text=GOOD.replace("Qwen/Qwen3-0.6B", self.said), content_type="text/plain")

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return f"http://127.0.0.1:{self.server.port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.close()


async def _outputs(target: TargetConfig, polls: int = 2) -> tuple[str, str]:
    config = Config(targets=(target,), poll_interval=0.02, timeout=1.0, gpu_enabled=False, window=10.0)
    async with TestClient(TestServer(make_app(config))) as client:
        metrics = await metrics_after_polls(client, polls)
        page = await (await client.get("/")).text()
    return metrics, page


@pytest.mark.parametrize("spelling", ["raw", "lower-case percent", "upper case", "every byte percent-encoded"])
async def test_the_canary_key_copied_into_a_label_is_not_exported(spelling: str) -> None:
    ApiKey(CANARY_KEY)  # `serve --canary.enabled` loaded it: the /metrics poller never sends it
    said = CANARY_KEY if spelling == "raw" else SPELLINGS[spelling](CANARY_KEY)
    async with Echo(said) as url:
        metrics, page = await _outputs(TargetConfig(url=url, name="a"))
    assert 'kvoffload_up{target="a"} 1.0' in metrics and REDACTED in metrics
    for out in (metrics, page):
        assert CANARY_KEY.lower() not in out.lower() and said.lower() not in out.lower()


@pytest.mark.parametrize("spelling", ["lower-case percent", "double percent-encoding", "mixed-case hex", "fullwidth"])
async def test_target_credentials_echoed_in_other_spellings_are_not_exported(spelling: str) -> None:
    async with Echo(SPELLINGS[spelling](PAIR)) as url:
        metrics, page = await _outputs(TargetConfig(url=url, name="a", auth=BasicAuth(USER, PASSWORD)))
    assert REDACTED in metrics
    for out in (metrics, page):
        assert SPELLINGS[spelling](PAIR).lower() not in out.lower()


async def test_a_version_redirect_is_logged_scrubbed_and_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    where = f"http://elsewhere.invalid/{TOKEN}/{quote(PAIR, safe='')}/{CANARY_KEY}?t={TOKEN}"
    ApiKey(CANARY_KEY)
    redirect = web.Response(status=302, headers={"Location": where})
    async with Echo("m", version=redirect) as url:
        await _outputs(TargetConfig(url=url, name="a", auth=BearerToken(TOKEN)), polls=6)
        register(PASSWORD, PAIR)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "/version" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # six polls, one line: the log budget
    text = caplog.text + "".join(logs.JsonFormatter().format(r) for r in caplog.records)
    for secret in (TOKEN, CANARY_KEY, quote(PAIR, safe="")):
        assert secret.lower() not in text.lower()


def test_engine_restart_lines_stay_within_the_log_budget(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kvoffload")
    config = Config(targets=(TargetConfig(url="http://h:1", name="a"),), gpu_enabled=False)
    poller = TargetPoller(config.targets[0], config, logs=LogBudget(timer=lambda: 0.0))
    for i in range(20):  # a target whose counters go back every other poll
        poller.ingest(GOOD if i % 2 == 0 else EARLY, now=1000.0 + i)
    restarts = [r for r in caplog.records if "restarted" in r.getMessage()]
    assert len(restarts) == 1, len(restarts)


# --- a reload that fails in any part never reads as success (MEDIUM) -------------------------------------


@pytest.mark.parametrize(
    "broken",
    {
        "bad hash": "basic_auth_users:\n  alice: '$2y$10$short'\n",
        "unknown key": "basic_auth_users: {}\nbasic_auth_userz: {}\n",
        "deleted file": None,
    }.items(),
    ids=lambda kv: kv[0],
)
async def test_a_web_config_that_fails_to_reload_is_reported_as_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: tuple[str, str | None]
) -> None:
    import argparse

    import bcrypt

    from kvoffload_exporter.commands.serve import ReloadStatus, _apply_reload
    from kvoffload_exporter.config import webconfig
    from kvoffload_exporter.server.app import EXPORTER
    from kvoffload_exporter.server.webauth import AuthGate, WebReload

    class Site:
        tls = None

    web_yml = tmp_path / "web.yml"
    web_yml.write_text(
        f"basic_auth_users:\n  alice: '{bcrypt.hashpw(b'right-password', bcrypt.gensalt(4)).decode()}'\n"
    )
    gate = AuthGate(webconfig.load(str(web_yml)).users)
    from kvoffload_exporter.cli import build_parser
    from kvoffload_exporter.commands.serve import config_from_args

    conf = tmp_path / "c.yaml"
    conf.write_text("gpu: false\nhost: false\ntargets: ['http://127.0.0.1:9']\n")
    cfg = config_from_args(build_parser().parse_args(["serve", "--config.file", str(conf)]), {})
    exporter = make_app(cfg)[EXPORTER]
    status = ReloadStatus(last_success=1.0)
    web_reload = WebReload(str(web_yml), None, gate, Site())  # type: ignore[arg-type]
    try:
        _apply_reload(argparse.Namespace(), exporter, status, web_reload, (cfg, web_reload.parse()))
        assert status.ok and status.answer() == "targets: reloaded\nweb config: reloaded\n"
        succeeded = status.last_success
        text = broken[1]
        if text is None:
            web_yml.unlink()
        else:
            web_yml.write_text(text)
        _apply_reload(argparse.Namespace(), exporter, status, web_reload, (cfg, web_reload.parse()))
        assert not status.ok, "a refused web config read as success"
        assert status.answer().splitlines() == [
            "targets: reloaded",
            "web config: reload failed, the running one is kept (see the log)",
        ]
        lines: list[tuple[str, float]] = []
        status.collect(type("Sink", (), {"add": lambda self, n, v, labels: lines.append((n, v))})())
        assert ("kvoffload_exporter_config_last_reload_successful", 0.0) in lines
        assert ("kvoffload_exporter_config_last_reload_success_timestamp_seconds", succeeded) in lines
        assert "web config reload failed, keeping the running one" in caplog.text
        assert await gate.verify("x", "alice", "right-password") is True  # the running users kept
    finally:
        gate.close()


@pytest.mark.parametrize("cut", [4, 9, 14])
async def test_a_secret_split_over_two_label_values_is_not_exported(cut: int) -> None:
    ApiKey(CANARY_KEY)
    head, tail = CANARY_KEY[:cut], CANARY_KEY[cut:]

    class Split(Echo):
        async def handle(self, request: web.Request) -> web.Response:
            if request.path == "/version":
                return web.json_response({"version": "0.26.0"})
            body = GOOD.replace('model_name="Qwen/Qwen3-0.6B"', f'model_name="{head}",zz_extra="{tail}"')
            return web.Response(text=body, content_type="text/plain")

    async with Split("") as url:
        metrics, page = await _outputs(TargetConfig(url=url, name="a"))
    assert 'kvoffload_up{target="a"} 1.0' in metrics
    for out in (metrics, page):
        assert head not in out or len(head) < 8, "the first part is exported"
        assert CANARY_KEY not in out.replace('",zz_extra="', "")


@pytest.mark.parametrize("spelling", ["upper case", "mixed-case hex"])
async def test_a_version_that_is_the_token_in_another_case_reads_unknown(spelling: str) -> None:
    version = web.json_response({"version": SPELLINGS[spelling](TOKEN)})
    async with Echo("m", version=version) as url:
        metrics, _ = await _outputs(TargetConfig(url=url, name="a", auth=BearerToken(TOKEN)))
    assert SPELLINGS[spelling](TOKEN).lower() not in metrics.lower() and 'vllm_version="unknown"' in metrics


def test_reloads_that_change_nothing_log_within_the_budget(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from kvoffload_exporter.cli import build_parser
    from kvoffload_exporter.commands.serve import ReloadStatus, config_from_args, reload
    from kvoffload_exporter.server.app import EXPORTER

    caplog.set_level(logging.INFO)
    conf = tmp_path / "c.yaml"
    conf.write_text("gpu: false\nhost: false\ntargets: ['http://127.0.0.1:9']\n")
    args = build_parser().parse_args(["serve", "--config.file", str(conf)])
    exporter = make_app(config_from_args(args, {}))[EXPORTER]
    for _ in range(20):  # a script POSTing /-/reload in a loop
        reload(args, exporter, ReloadStatus())
    assert caplog.text.count("nothing changed") <= 1


def test_the_secret_list_cap_is_counted_when_it_drops_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide list of secrets is bounded; a secret dropped at the cap is no longer removed from text,
    so every drop is counted in kvoffload_exporter_redaction_secrets_evicted_total."""
    from kvoffload_exporter import redact
    from kvoffload_exporter.expose.render import Exposition
    from kvoffload_exporter.expose.selfmon import SelfStats

    monkeypatch.setattr(redact, "_KNOWN", {})
    monkeypatch.setattr(redact, "_ALL", [])
    monkeypatch.setattr(redact, "_EVICTED", [0])
    monkeypatch.setattr(redact, "_MAX_KNOWN", 2)
    redact.register("first-secret-1", "second-secret-2")
    assert redact.evicted() == 0
    redact.register("third-secret-3")
    assert redact.evicted() == 1 and "first-secret-1" not in redact._KNOWN
    x = Exposition()
    SelfStats().render(x, configured=0, up=0, probed=0)
    assert "kvoffload_exporter_redaction_secrets_evicted_total 1.0" in x.text()
