"""The ``metadata:`` section of ``cluster.yaml`` and the factory that builds a backend from it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import MetadataService, NodeInfo
from .embedded import EmbeddedMetadata


class StaticNode(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    node_id: str
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)


class MetadataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    backend: Literal["embedded", "redis"] = "embedded"
    """embedded: one host, static ``nodes``; redis: node membership and heartbeats in Redis."""
    url: str = "redis://127.0.0.1:6379/0"
    """Redis URL (redis backend)."""
    namespace: str = Field(default="hicache", min_length=1)
    """Key prefix in Redis: clusters sharing one Redis use different namespaces."""
    timeout_s: float = Field(default=0.5, gt=0)
    """Every Redis call; unreachable: the remote tier detaches and rejoins by itself."""
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    """How often a node renews its membership."""
    heartbeat_ttl_s: float = Field(default=5.0, gt=0)
    """A node that misses heartbeats for this long leaves the membership."""
    refresh_interval_s: float = Field(default=1.0, gt=0)
    """How often clients re-read the membership."""
    nodes: list[StaticNode] = Field(default_factory=list)
    """Embedded: the fixed member list"""


def make_metadata(cfg: MetadataConfig) -> MetadataService:
    if cfg.backend == "redis":
        from .redis_backend import RedisMetadata

        return RedisMetadata(cfg.url, cfg.namespace, cfg.timeout_s)
    return EmbeddedMetadata(NodeInfo(n.node_id, n.host, n.port) for n in cfg.nodes)
