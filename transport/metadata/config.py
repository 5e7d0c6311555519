"""The ``metadata:`` section of ``cluster.yaml`` and the factory that builds a backend from it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import MetadataService, NodeInfo
from .embedded import EmbeddedMetadata


class StaticNode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node_id: str
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)


class MetadataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["embedded", "redis"] = "embedded"
    url: str = "redis://127.0.0.1:6379/0"
    namespace: str = Field(default="hicache", min_length=1)
    timeout_s: float = Field(default=0.5, gt=0)
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    heartbeat_ttl_s: float = Field(default=5.0, gt=0)
    refresh_interval_s: float = Field(default=1.0, gt=0)
    nodes: list[StaticNode] = Field(default_factory=list)  # embedded: the fixed member list


def make_metadata(cfg: MetadataConfig) -> MetadataService:
    if cfg.backend == "redis":
        from .redis_backend import RedisMetadata

        return RedisMetadata(cfg.url, cfg.namespace, cfg.timeout_s)
    return EmbeddedMetadata(NodeInfo(n.node_id, n.host, n.port) for n in cfg.nodes)
