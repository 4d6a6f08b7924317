"""Credentials for one target: basic auth or a bearer token, read from the URL or from files.

Pure apart from reading the two secret files. The secret never reaches a repr, label, page or log:
only `header()` (and `TargetConfig.source_auth()`) hand it to the HTTP source."""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass, field
from urllib.parse import unquote


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
    unread, and no error shows a byte of the file."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore the flag)
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                errors.append(f"{where} {what} {path} is not a regular file")
                return None
            data = f.read(MAX_SECRET_BYTES + 1)
        value = data.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        errors.append(f"{where} cannot read {what} {path}: {getattr(e, 'strerror', None) or 'not UTF-8 text'}")
        return None
    if len(data) > MAX_SECRET_BYTES:
        errors.append(f"{where} {what} {path} is over {MAX_SECRET_BYTES:,} bytes")
        return None
    if not value:
        errors.append(f"{where} {what} {path} is empty")
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
        return BearerToken(token) if token else None
    if password_file:
        if not username:
            errors.append(f"{where} password_file needs username")
            return None
        password = _read_secret(password_file, "password_file", where, errors)
        return BasicAuth(username, password) if password is not None else None
    if userinfo:
        user, _, password = userinfo.partition(":")
        return BasicAuth(unquote(username or user), unquote(password))
    return None
