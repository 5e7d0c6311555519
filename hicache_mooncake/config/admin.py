"""``admin:``: the backend's own admin endpoint (per-tier operations at runtime; ``hicache_mooncake.admin``)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator

TOKEN_ENV = "HICACHE_MOONCAKE_ADMIN_TOKEN"


class AdminConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    port: int | None = Field(default=None, ge=0, le=65535)
    """Base port of the admin endpoint: the rank with index ``i`` (``tp_rank + tp_size * (pp_rank +
    pp_size * dp_rank)``) serves ``port + i``; 0: any free port (logged and written to
    ``discovery_dir``); None: no admin endpoint. The shipped presets set 0. Every request needs the
    bearer token, on loopback too."""
    host: str = "127.0.0.1"
    """Address of the endpoint. Anything but loopback needs the operator's token (``token_file`` or
    ``token_env``; the backend refuses to start the endpoint without one)."""
    token_file: str = ""
    """File holding the operator's bearer token (first line); read at attach, never logged. Takes
    precedence over ``token_env``. With neither, the first rank of the user generates a random
    token in ``<discovery_dir>/admin.token`` (0600, in a 0700 directory owned by the user; one
    others could read or replace is refused), which every rank of the user and ``hicache-mooncake
    admin`` read."""
    token_env: str = TOKEN_ENV
    """Environment variable holding the bearer token when ``token_file`` is empty."""
    discovery_dir: str = ""
    """Where each rank writes a small file with its admin URL, so ``hicache-mooncake admin`` reaches
    every rank of the host, and the generated token (``admin.token``) when none is configured ("":
    ``$XDG_RUNTIME_DIR/hicache-mooncake/admin``, else ``/tmp/hicache-mooncake-<uid>/admin``;
    created 0700, private to the user)."""
    operation_timeout_s: float = Field(default=300.0, gt=0)
    """Longest an admin operation (resize, detach, attach, clear) may run when the request names no
    ``timeout_s``; past it the operation stops and reports what is left."""

    @field_validator("token_file", "discovery_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not os.path.isabs(os.path.expanduser(value)):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value
