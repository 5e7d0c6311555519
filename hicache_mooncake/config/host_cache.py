"""``host_cache:``: the one cache per host that every SGLang process of the host uses as a client
(``tiers.host_cache`` says whether a backend does). The service runs ``tiers.dram`` (its arena in
shared memory), ``tiers.ssd`` and ``tiers.remote`` of the YAML it was started with."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hicache_mooncake.runtime_dir import runtime_dir


class HostCacheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    dir: str = ""
    """Directory of the service's socket, lock, log and config snapshot ("":
    ``$XDG_RUNTIME_DIR/hicache-mooncake``, else ``/tmp/hicache-mooncake-<uid>``). Created 0700; refused
    when another user owns it or others may write it. Processes naming the same ``dir`` and ``name``
    share one cache."""
    name: str = Field(default="host-cache", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    """The cache's name: ``<dir>/<name>.sock`` (and ``.lock``, ``.log``, ``.yaml``), and its arena."""
    shm_dir: str = "/dev/shm"
    """Where the service's shared-memory arena file lives (clients map it from there only)."""
    autostart: bool = True
    """The first backend that finds no service starts one (a detached process; exactly one however many
    ranks race). false: an operator runs it (``hicache-mooncake host-cache --config FILE``, or the
    systemd unit ``configs/hicache-mooncake-host-cache.service``)."""
    start_timeout_s: float = Field(default=10.0, ge=0)
    """How long a backend's attach waits for the service to answer (start included). Past it the
    backend serves misses and keeps trying in the background; SGLang is never blocked longer."""
    retry_interval_s: float = Field(default=1.0, gt=0)
    """How often a backend checks the service in the background (and starts it again when it is gone)."""
    idle_timeout_s: float = Field(default=600.0, ge=0)
    """The service stops this long after its last client disconnected (0: never)."""
    connections: int = Field(default=4, ge=1)
    """Connections per backend to the service (SGLang's storage threads use them at once)."""
    max_clients: int = Field(default=1024, ge=1)
    """Connections the service serves at once (one thread each)."""
    metrics_port: int | None = Field(default=0, ge=0, le=65535)
    """The service serves Prometheus metrics (``/metrics``, ``/healthz``) on this port of
    ``metrics.host``: its tiers and per-client accounting (requests, reservations, commits, lookups,
    hits per client process). 0: any free port, written to ``metrics.discovery_dir`` as the service's
    endpoint, so ``hicache-mooncake stats`` finds it with the ranks; None: not served."""

    @field_validator("dir", "shm_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not os.path.isabs(os.path.expanduser(value)):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    def resolved_dir(self) -> str:
        """``dir``, or the per-user default (module docstring)."""
        if self.dir:
            return os.path.expanduser(self.dir)
        return str(runtime_dir())
