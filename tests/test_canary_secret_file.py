"""The canary's salt secret file is read capped and never written through a link: `/dev/zero` or a FIFO
is refused at once, a short file (or a link to one) is refused instead of being truncated and
re-created, a dangling link is refused instead of creating its target, and a new secret is created
only where nothing is (0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from support.hang import fails_if_blocked

from kvoffload_exporter.canary.wire.secrets import SecretPathError, load_api_key, load_or_create_secret


def test_an_endless_device_is_refused_unread() -> None:
    with pytest.raises(SecretPathError, match="is a character device, not a regular file"):
        load_or_create_secret("/dev/zero")  # was read until MemoryError


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "secret")
    with fails_if_blocked(), pytest.raises(SecretPathError, match="is a FIFO"):
        load_or_create_secret(str(tmp_path / "secret"))
    with fails_if_blocked(), pytest.raises(SecretPathError, match="is a FIFO"):
        load_api_key(str(tmp_path / "secret"))


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"x" * 5000)
    with pytest.raises(SecretPathError, match="over the 4,096-byte cap"):
        load_or_create_secret(str(tmp_path / "secret"))


def test_a_short_file_is_refused_not_truncated(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"short\n")
    with pytest.raises(SecretPathError, match="holds 5 bytes, fewer than 16"):
        load_or_create_secret(str(tmp_path / "secret"))
    assert (tmp_path / "secret").read_bytes() == b"short\n"


def test_a_link_to_a_short_file_never_overwrites_the_link_target(tmp_path: Path) -> None:
    victim = tmp_path / "authorized_keys"
    victim.write_bytes(b"ssh-ed25519\n")  # 11 bytes: the old code re-created the secret through the link
    (tmp_path / "secret").symlink_to(victim)
    with pytest.raises(SecretPathError, match="fewer than 16"):
        load_or_create_secret(str(tmp_path / "secret"))
    assert victim.read_bytes() == b"ssh-ed25519\n"


def test_a_dangling_link_is_refused_and_its_target_not_created(tmp_path: Path) -> None:
    (tmp_path / "secret").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SecretPathError, match="symbolic link to nothing"):
        load_or_create_secret(str(tmp_path / "secret"))
    assert not (tmp_path / "elsewhere").exists()


def test_a_link_to_a_real_secret_is_read(tmp_path: Path) -> None:
    """Mounted secrets (Kubernetes) are links to regular files: reading through one is fine."""
    real = tmp_path / "..data" / "secret"
    real.parent.mkdir()
    real.write_bytes(b"0123456789abcdef0123\n")
    (tmp_path / "secret").symlink_to(real)
    assert load_or_create_secret(str(tmp_path / "secret")) == b"0123456789abcdef0123"


def test_a_new_secret_is_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state" / "secret"
    first = load_or_create_secret(str(path))
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600 and len(first) == 64
    assert load_or_create_secret(str(path)) == first
