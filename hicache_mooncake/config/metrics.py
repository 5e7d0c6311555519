"""``metrics:`` (the backend's ranks) and ``node.metrics:`` (a memory node): where a process serves
its Prometheus endpoint (``/metrics``) and health check (``/healthz``)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ExporterConfig(BaseModel):
    """One process's endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    port: int | None = Field(default=None, ge=0, le=65535)
    """Serve ``/metrics`` and ``/healthz`` on this port (0: any free port, logged and written to
    ``discovery_dir``); None: do not serve."""
    host: str = "127.0.0.1"
    """Address of the endpoint (loopback unless you mean it)."""
    discovery_dir: str = ""
    """Where each serving process writes a small file with its URL, so ``hicache-mooncake stats``
    finds every rank and node of the host ("": ``$XDG_RUNTIME_DIR/hicache-mooncake/metrics``, else
    ``/tmp/hicache-mooncake-<uid>/metrics``; created 0700, private to the user)."""

    @field_validator("discovery_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not os.path.isabs(os.path.expanduser(value)):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value


class MetricsConfig(ExporterConfig):
    """The backend: one endpoint per SGLang scheduler process (rank)."""

    port: int | None = Field(default=None, ge=0, le=65535)
    """Base port: the rank with index ``i`` (``tp_rank + tp_size * (pp_rank + pp_size * dp_rank)``)
    serves ``port + i``, so one YAML serves every rank of a TP/PP group; 0: each rank takes any free
    port (logged, and written to ``discovery_dir``); None: do not serve. The shipped presets set 0
    on loopback, so ``hicache-mooncake stats`` finds every rank without configuration."""
