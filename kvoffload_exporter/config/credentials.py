"""Credentials for one target: basic auth or a bearer token, read from the URL or from files.

Pure apart from reading the two secret files. The secret never reaches a repr, label, page or log:
only `header()` (and `TargetConfig.source_auth()`) hand it to the HTTP source."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import unquote

from kvoffload_exporter import redact
from kvoffload_exporter.saferead import FileRefused, read_regular


@dataclass(frozen=True)
class BasicAuth:
    username: str
    password: str = field(repr=False)

    def header(self) -> dict[str, str]:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}


@dataclass(frozen=True)
class BearerToken:
    token: str = field(repr=False)

    def header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


Auth = BasicAuth | BearerToken


MAX_SECRET_BYTES = 64 * 1024


def _read_secret(path: str, what: str, where: str, errors: list[str]) -> str | None:
    """The file's text, stripped; a FIFO, a device (`/dev/zero`) or a file over 64 KiB is refused
    unread (kvoffload_exporter.saferead), and so is a value with a line break or another control
    character inside: it cannot be sent in a header. No error shows a byte of the file."""
    try:
        value = read_regular(path, MAX_SECRET_BYTES).decode("utf-8").strip()
    except FileRefused as e:
        why = f"cannot read {what} {path}: {e.strerror}" if e.strerror else f"{what} {path} {e}"
        errors.append(f"{where} {why}")
        return None
    except UnicodeDecodeError:
        errors.append(f"{where} {what} {path}: not UTF-8 text")
        return None
    if not value:
        errors.append(f"{where} {what} {path} is empty")
        return None
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in value):
        errors.append(f"{where} {what} {path} holds a line break or another control character (one line only)")
        return None
    return value


def target_auth(
    userinfo: str,
    username: str | None,
    password_file: str | None,
    bearer_token_file: str | None,
    where: str,
    errors: list[str],
) -> Auth | None:
    """Basic auth from the URL's user:password@ or username + password_file; bearer from its file.

    The files are read now (start-up, SIGHUP): a rotated secret takes effect on reload."""
    if bearer_token_file and (userinfo or password_file):
        errors.append(f"{where} bearer_token_file excludes basic auth (password_file or user:pass@ in the url)")
        return None
    if bearer_token_file:
        token = _read_secret(bearer_token_file, "bearer_token_file", where, errors)
        return BearerToken(token) if token and _long_enough(token, "bearer token", where, errors) else None
    if password_file:
        if not username:
            errors.append(f"{where} password_file needs username")
            return None
        password = _read_secret(password_file, "password_file", where, errors)
        if password is None or not _long_enough(password, "password", where, errors):
            return None
        return BasicAuth(username, password)
    if userinfo:
        user, _, password = userinfo.partition(":")
        if not _long_enough(unquote(password), "password in the url", where, errors):
            return None
        return BasicAuth(unquote(username or user), unquote(password))
    return None


def _long_enough(secret: str, what: str, where: str, errors: list[str]) -> bool:
    """A credential shorter than redact.MIN_SECRET cannot be removed from what the target answers without
    rewriting ordinary data (a 5-character password inside every model name): refused at load."""
    if not secret or not redact.too_short(secret):  # an empty password is no secret to remove
        return True
    errors.append(
        f"{where} {what} has {len(secret)} characters, fewer than {redact.MIN_SECRET}: "
        "too short to be removed safely from what the target answers"
    )
    return False
