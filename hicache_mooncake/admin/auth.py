"""The admin endpoint's bearer token: where it comes from, when it is required, how it is checked.

The token comes from ``admin.token_file`` (its first line) or, when that is empty, the environment
variable ``admin.token_env``. It is never logged, and never part of an error message. An endpoint
bound to anything but loopback refuses to start without a token; one on loopback requires it too
when one is configured. Comparison is constant-time.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path

from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError


def load_token(config: AdminConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The configured token, or None when none is configured. ConfigError naming the key when the
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


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_for(config: AdminConfig, token: str | None) -> None:
    """ConfigError when the endpoint would listen beyond loopback without a token."""
    if token is None and not is_loopback(config.host):
        raise ConfigError(
            f"admin.host {config.host!r} is not loopback: the admin endpoint needs a token "
            f"(admin.token_file, or ${config.token_env})"
        )


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries the token (always True when none is configured)."""
    if token is None:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())
