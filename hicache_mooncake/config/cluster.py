"""Cluster sections of the YAML: the client's ``tiers.remote``, plus ``node:`` and ``metadata:``
(read by ``hicache-mooncake node``; validated here too, so one file serves both sides and a bad
key in it is refused wherever the file is loaded)."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hicache_mooncake.sizes import parse_size
from hicache_mooncake.tiers.pool_providers.mooncake_config import MooncakeConfig
from hicache_mooncake.transport.metadata import MetadataConfig
from hicache_mooncake.transport.node_config import NodeConfig

__all__ = ["MetadataConfig", "MooncakeSection", "NodeSection", "RemoteTierConfig"]


class NodeSection(NodeConfig):
    """``NodeConfig`` with sizes accepted as strings (``"4GiB"``)."""

    @field_validator("capacity", "max_meta", "max_payload", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)


class MooncakeSection(MooncakeConfig):
    """``MooncakeConfig`` with sizes accepted as strings (``"4GiB"``)."""

    @field_validator("segment_size", "local_buffer_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)


class RemoteTierConfig(BaseModel):
    """Client side of the remote DRAM pool, shared by every instance: our memory nodes (found
    through ``metadata:``) or a Mooncake Store cluster (``mooncake:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Remote DRAM pool on/off (needs memory nodes and ``metadata``, or a Mooncake cluster)."""
    provider: Literal["nodes", "mooncake"] = "nodes"
    """What stores the pool: ``nodes`` (our memory nodes: one host's shared tier, small clusters) or
    ``mooncake`` (Mooncake Store: replicas, master HA, RDMA; settings under ``mooncake:``)."""
    engine: Literal["tcp", "local", "rdma"] = "tcp"
    """nodes: transport: tcp anywhere; local when nodes share this host (/dev/shm); rdma with pyverbs."""
    timeout_s: float = Field(default=2.0, gt=0)
    """Deadline of one batched call; a dead node, master or segment holder is a miss within it."""
    connect_timeout_s: float = Field(default=1.0, gt=0)
    """nodes: deadline of one TCP connect to a node."""
    connections_per_peer: int = Field(default=4, ge=1)
    """nodes: parallel connections per node (SGLang's threads use them concurrently)."""
    write_through: bool = True
    """Every set is also stored in the pool, so other instances find it."""
    promote_on_hit: bool = True
    """A pool hit is copied into local DRAM."""
    secret_env: str = "HICACHE_NODE_SECRET"
    """nodes: environment variable holding the shared secret (the same on nodes and clients)."""
    secret_file: str = ""
    """nodes: file holding the shared secret (wins over secret_env when set)."""
    mooncake: MooncakeSection = MooncakeSection()
    """mooncake: the Mooncake Store client (read with ``provider: mooncake``)."""

    @model_validator(mode="after")
    def _deadlines(self) -> RemoteTierConfig:
        for name in ("put_timeout_s", "get_timeout_s"):
            value = getattr(self.mooncake, name)
            if value is not None and value > self.timeout_s:
                raise ValueError(
                    f"mooncake.{name} ({value}) exceeds timeout_s ({self.timeout_s}): a call must "
                    "answer within tiers.remote.timeout_s"
                )
        return self

    def secret(self) -> bytes:
        if self.secret_file:
            with open(self.secret_file, "rb") as f:
                return f.read().strip()
        return os.environ.get(self.secret_env, "").encode()
