"""Canary settings validation, secrets and the serve flags."""

from __future__ import annotations

import argparse
import os
import stat

import pytest

from kvoffload_exporter.canary.config import CanarySettings, from_mapping
from kvoffload_exporter.canary.plugin import add_arguments, settings_from_args
from kvoffload_exporter.canary.wire.secrets import (
    ApiKey,
    SecretError,
    load_api_key,
    load_or_create_secret,
)
from kvoffload_exporter.config.settings import Config, ConfigError, TargetConfig


def test_valid_mapping() -> None:
    s = from_mapping(
        {
            "enabled": True,
            "strategy": "pressure",
            "allow_pressure": True,
            "interval": "2m",
            "budget_tokens_per_hour": 50_000,
            "settle": 0,
            "control_target": "http://h:8001/",
            "id_range": [1000, 5000],
        }
    )
    assert s.effective_strategy == "pressure" and s.interval == 120.0 and s.settle == 0.0
    assert s.control_target == "http://h:8001" and s.id_range == (1000, 5000)
    assert from_mapping({"budget_tokens_per_hour": None}).budget_tokens_per_hour is None


def test_every_error_is_listed() -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping(
            {
                "strategy": "flood",
                "interval": "soon",
                "min_samples": 1,
                "api_key": "sk-123",
                "confidence": 2,
                "control_target": "ftp://x",
                "flush": "yes",
            }
        )
    text = "\n".join(e.value.errors)
    for needle in ("strategy", "interval", "min_samples", "api_key_file", "confidence", "control_target", "flush"):
        assert needle in text
    assert "sk-123" not in text  # an inline key is refused without being echoed


def test_pressure_needs_the_allow_flag() -> None:
    with pytest.raises(ConfigError, match="allow_pressure"):
        from_mapping({"strategy": "pressure"})
    assert CanarySettings(strategy="pressure").effective_strategy == "wait"


def _serve_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_serve_flags_override_the_config_file() -> None:
    cfg = Config(targets=(TargetConfig("http://a:8000"),)).with_section("canary", CanarySettings(interval=600.0))
    assert settings_from_args(_serve_args(), cfg) is None
    s = settings_from_args(
        _serve_args(
            "--canary.enabled",
            "--canary.allow-pressure",
            "--canary.interval",
            "30s",
            "--canary.budget-tokens-per-hour",
            "1000",
        ),
        cfg,
    )
    assert s is not None and s.effective_strategy == "pressure" and s.interval == 30.0
    assert s.budget_tokens_per_hour == 1000
    two = Config(targets=(TargetConfig("http://a:8000"), TargetConfig("http://b:8000")))
    with pytest.raises(ConfigError, match="exactly one target"):
        settings_from_args(_serve_args("--canary.enabled", "--canary.control-target", "http://c:8000"), two)


def test_api_key_from_file_or_env_never_printed(tmp_path, monkeypatch) -> None:
    f = tmp_path / "key"
    f.write_text("sk-secret-1\n")
    key = load_api_key(str(f))
    assert key is not None and key.header() == {"Authorization": "Bearer sk-secret-1"}
    assert "sk-secret" not in repr(key) + str(key) + f"{key}"
    monkeypatch.setenv("KVOFFLOAD_API_KEY", "sk-env-key-1")
    assert load_api_key(None).header()["Authorization"] == "Bearer sk-env-key-1"  # type: ignore[union-attr]
    monkeypatch.delenv("KVOFFLOAD_API_KEY")
    assert load_api_key(None) is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SecretError):
        load_api_key(str(tmp_path / "empty"))
    assert isinstance(ApiKey("x"), ApiKey)


def test_secret_is_created_once_private_and_reused(tmp_path) -> None:
    path = tmp_path / "state" / "canary-secret"
    s1 = load_or_create_secret(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_secret(str(path)) == s1 and len(s1) >= 32
