"""Cluster sections of the YAML: the client's ``tiers.remote``, plus ``node:`` and ``metadata:``
(read by ``hicache-mooncake node``; validated here too, so one file serves both sides and a bad
key in it is refused wherever the file is loaded)."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hicache_mooncake.sizes import parse_size
from hicache_mooncake.transport.metadata import MetadataConfig
from hicache_mooncake.transport.node_config import NodeConfig

__all__ = ["MetadataConfig", "NodeSection", "RemoteTierConfig"]


class NodeSection(NodeConfig):
    """``NodeConfig`` with sizes accepted as strings (``"4GiB"``)."""

    @field_validator("capacity", "slab_size", "max_meta", "max_payload", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)


class RemoteTierConfig(BaseModel):
    """Client side of the remote DRAM pool (memory nodes found through ``metadata:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Remote DRAM pool on/off (needs memory nodes and ``metadata``)."""
    engine: Literal["tcp", "local", "rdma"] = "tcp"
    """Transport: tcp anywhere; local when nodes share this host (/dev/shm); rdma with pyverbs."""
    timeout_s: float = Field(default=2.0, gt=0)
    """Deadline of one batched call; a dead or slow node is a miss within it."""
    connect_timeout_s: float = Field(default=1.0, gt=0)
    """Deadline of one TCP connect to a node."""
    connections_per_peer: int = Field(default=4, ge=1)
    """Parallel connections per node (SGLang's threads use them concurrently)."""
    write_through: bool = True
    """Every set is also stored in the pool, so other instances find it."""
    promote_on_hit: bool = True
    """A pool hit is copied into local DRAM."""
    secret_env: str = "HICACHE_NODE_SECRET"
    """Environment variable holding the shared secret (the same on nodes and clients)."""
    secret_file: str = ""
    """File holding the shared secret (wins over secret_env when set)."""
    allow_unauthenticated: bool = False
    """Reach nodes beyond loopback without a shared secret (warned); otherwise such nodes are refused."""
    shm_dir: str = "/dev/shm"
    """engine local: map only node arenas in this directory (the nodes' ``node.shm_dir``)."""

    def secret(self) -> bytes:
        if self.secret_file:
            with open(self.secret_file, "rb") as f:
                return f.read().strip()
        return os.environ.get(self.secret_env, "").encode()
