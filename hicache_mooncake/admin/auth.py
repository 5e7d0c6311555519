"""The admin endpoint's bearer token: where it comes from, when it is required, how it is checked.

Every request needs a token, on loopback too (any local user can reach a loopback port). The token
is the operator's when one is configured: ``admin.token_file`` (its first line) or, when that is
empty, the environment variable ``admin.token_env``. Otherwise the first rank of the user to start
generates one (``generated_token``) in ``<discovery dir>/admin.token``: a 0600 file in a 0700
directory owned by the user, which every rank of that user and the ``hicache-mooncake admin``
command read. A token file or directory others could read or replace is refused (ConfigError),
never used. An endpoint bound to anything but loopback refuses to start without an operator's
token. The token is never logged, and never part of an error message; comparison is
constant-time.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.runtime_dir import private_dir

TOKEN_FILE = "admin.token"


class TokenPlaceError(ConfigError):
    """The generated token cannot be kept private: its directory or file could be read or replaced
    by someone else (or cannot be made). Another local user can cause it (a planted
    ``/tmp/hicache-mooncake-<uid>``), so it never fails a backend's attach (``server.start_failure_fatal``)."""


def load_token(config: AdminConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The operator's token, or None when none is configured. ConfigError naming the key when the
    token file cannot be read or is empty."""
    if config.token_file:
        path = Path(os.path.expanduser(config.token_file))
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"admin.token_file: cannot read {path}: {exc.strerror or exc}") from None
        token = text.splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise ConfigError(f"admin.token_file: {path} is empty")
        return token
    env = os.environ if environ is None else environ
    value = env.get(config.token_env, "").strip() if config.token_env else ""
    return value or None


def token_path(directory: Path) -> Path:
    """Where the generated token of the ranks registering in ``directory`` lives."""
    return directory / TOKEN_FILE


def generated_token(directory: Path) -> str:
    """The token in ``<directory>/admin.token``, created (0600, random, atomically: concurrent
    ranks all end up with the first one's) when absent. ConfigError when the directory or the file
    could be read or replaced by someone else."""
    try:
        private_dir(directory, "admin token directory")
    except OSError as exc:
        raise TokenPlaceError(f"admin token: cannot keep it private: {exc}") from None
    path = token_path(directory)
    with contextlib.suppress(FileNotFoundError):
        return read_token_file(path)
    tmp = directory / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic: the first rank's token wins
    except OSError as exc:
        raise TokenPlaceError(f"admin token: cannot create {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return read_token_file(path)


def read_token_file(path: Path) -> str:
    """The first line of a generated token file. FileNotFoundError when there is none; ConfigError
    when it is not a regular file owned by us (or root) that only its owner can read and write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise TokenPlaceError(f"admin token: cannot read {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o077:
            raise TokenPlaceError(
                f"admin token: {path} must be a regular file owned by uid {os.geteuid()} with mode 0600 "
                f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); remove it to get a new one"
            )
        text = os.read(fd, 4096).decode("utf-8", "replace")
    finally:
        os.close(fd)
    token = text.splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise TokenPlaceError(f"admin token: {path} is empty; remove it to get a new one")
    return token


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_for(config: AdminConfig, token: str | None) -> None:
    """ConfigError when the endpoint would listen beyond loopback without the operator's token."""
    if token is None and not is_loopback(config.host):
        raise ConfigError(
            f"admin.host {config.host!r} is not loopback: the admin endpoint needs a token "
            f"(admin.token_file, or ${config.token_env})"
        )


def authorized(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries the token."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())
