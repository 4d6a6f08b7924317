"""The canary's two secrets: the persisted salt secret and the optional API key (env or file only).

The API key is wrapped so that `repr`/`str`/f-strings show `<redacted>`: it can reach only the
`Authorization` header. A hostile or careless server can still echo it back (in an error body, a
header, a label), so it is registered with kvoffload_exporter.redact, the program's one redaction:
every text read from a target passes through `scrub` (or its target's scrubber) before it is stored,
logged or printed, and any `Authorization`, `Bearer` or `Basic` credential whatever its value becomes
`<redacted>`. A key shorter than redact.MIN_SECRET is refused at load.
"""

from __future__ import annotations

import logging
import os
import secrets
from contextlib import suppress
from pathlib import Path

from kvoffload_exporter import redact
from kvoffload_exporter.redact import scrub

__all__ = ["ApiKey", "ScrubFilter", "SecretError", "SecretPathError", "scrub"]


class ScrubFilter(logging.Filter):
    """A logger filter applying `scrub` to every record's message: the last guard before the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        clean = scrub(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        return True


class ApiKey:
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value
        # every exit and every target's scrubber searches for it (a target may echo it into a label)
        redact.register(value, shared=True)

    def header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._value}"}

    def __repr__(self) -> str:
        return f"ApiKey({redact.REDACTED})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return redact.REDACTED


class SecretError(Exception):
    pass


class SecretPathError(SecretError):
    """The file named for a secret is not one to read or create (a FIFO, a device, a dangling link, a
    file too short to be a secret): a bad path, refused before anything is sent."""


MAX_API_KEY_BYTES = 64 * 1024
MAX_SECRET_BYTES = 4 * 1024
MIN_SECRET_BYTES = 16


def _read(path: str | Path, max_bytes: int, what: str) -> bytes:
    from kvoffload_exporter.saferead import FileRefused, read_regular  # the file loaders' own helper

    try:
        return read_regular(path, max_bytes)
    except FileRefused as e:
        if e.strerror:
            raise SecretError(f"cannot read {what} {path}: {e.strerror}") from None
        raise SecretPathError(f"{what} {path} {e}") from None


def load_api_key(path: str | None, env: str = "KVOFFLOAD_API_KEY") -> ApiKey | None:
    """From the file when given (first line, stripped), else from the environment variable, else None.
    The file is read as a regular file under 64 KiB (kvoffload_exporter.saferead): a FIFO never blocks."""
    if path:
        try:
            value = _read(path, MAX_API_KEY_BYTES, "API key file").decode("utf-8").strip().splitlines()
        except UnicodeDecodeError:
            raise SecretError(f"API key file {path} is not UTF-8 text") from None
        if not value or not value[0].strip():
            raise SecretError(f"API key file {path} is empty")
        return _checked(value[0].strip(), f"API key file {path}")
    v = os.environ.get(env, "").strip()
    return _checked(v, env) if v else None


def _checked(value: str, where: str) -> ApiKey:
    if redact.too_short(value):
        raise SecretError(
            f"{where} holds a key of {len(value)} characters, fewer than {redact.MIN_SECRET}: "
            "too short to be removed safely from what targets answer"
        )
    return ApiKey(value)


def default_secret_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "kvoffload-exporter" / "canary-secret"


def load_or_create_secret(path: str | None = None) -> bytes:
    """The installation's salt secret: read it, or create 32 random bytes (mode 0600) on first use.

    Fixed per installation so the salt family stays stable across restarts (canary blocks never mix
    with users' blocks, and an operator can recognise them), secret so users cannot share them.
    Read as a regular file under 4 KiB (a link to one is followed: mounted secrets are links); created
    only where nothing is (O_CREAT | O_EXCL | O_NOFOLLOW), so a link is never written through, a
    dangling one is refused, and a short file is refused rather than truncated and re-created."""
    p = Path(path) if path else default_secret_path()
    if not os.path.lexists(p):
        created = _create(p)
        if created is not None:
            return created
    if not os.path.exists(p):  # lexists but not exists: a link pointing nowhere
        raise SecretPathError(f"canary secret {p} is a symbolic link to nothing: refusing to create its target")
    data = _read(p, MAX_SECRET_BYTES, "canary secret").strip()
    if len(data) < MIN_SECRET_BYTES:
        raise SecretPathError(
            f"canary secret {p} holds {len(data)} bytes, fewer than {MIN_SECRET_BYTES}: "
            "not a secret this program wrote (remove it to create a new one)"
        )
    return data


def _create(p: Path) -> bytes | None:
    """A new secret in a new file, or None when something appeared at `p` first (it is read instead)."""
    data = secrets.token_hex(32).encode()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return None
    except OSError as e:
        raise SecretError(f"cannot create canary secret {p}: {e.strerror} (set canary.secret_file)") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data + b"\n")
    except OSError as e:  # a disk full: no short file left behind to be refused next time
        with suppress(OSError):
            os.unlink(p)
        raise SecretError(f"cannot create canary secret {p}: {e.strerror} (set canary.secret_file)") from None
    return data
