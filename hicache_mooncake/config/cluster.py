"""Cluster sections of the YAML: the client's ``tiers.remote``, plus ``node:`` and ``metadata:``
(read by ``hicache-mooncake node``; validated here too, so one file serves both sides and a bad
key in it is refused wherever the file is loaded)."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hicache_mooncake.sizes import parse_size
from hicache_mooncake.transport.metadata import MetadataConfig
from hicache_mooncake.transport.node_config import NodeConfig
from hicache_mooncake.transport.rdma_options import RdmaOptions

__all__ = ["MetadataConfig", "NodeSection", "RdmaClientConfig", "RemoteTierConfig"]


class NodeSection(NodeConfig):
    """``NodeConfig`` with sizes accepted as strings (``"4GiB"``)."""

    @field_validator("capacity", "max_meta", "max_payload", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)


class RdmaClientConfig(BaseModel):
    """The client's RDMA port (``tiers.remote.engine: rdma``); defaults suit a RoCE v2 fabric."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    device: str = "auto"
    """RDMA device, e.g. ``mlx5_0`` or ``rxe0``; ``auto``: the first one libibverbs lists."""
    port: int = Field(default=1, ge=1)
    """Port of the device."""
    gid_index: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    """GID table index; ``auto``: the first RoCE v2 GID with an IPv4 address (index 0 on IB)."""
    hop_limit: int = Field(default=64, ge=1, le=255)
    """IP hop limit of RoCE v2 packets (1 would stop them at the first router)."""
    traffic_class: int = Field(default=0, ge=0, le=255)
    """Traffic class (DSCP << 2 | ECN), e.g. 106 for a fabric's lossless RoCE class."""
    service_level: int = Field(default=0, ge=0, le=15)
    """Service level (InfiniBand; the PCP priority on some RoCE setups)."""
    qps_per_node: int = Field(default=4, ge=1)
    """Queue pairs per node: calls in flight to one node at once (SGLang's threads)."""
    scratch_size: int = Field(default=8 << 20, ge=64 << 10)
    """Registered bounce memory for object headers and buffers SGLang did not register."""
    fallback: Literal["tcp", "none"] = "tcp"
    """No usable device on this host: ``tcp`` uses TCP instead (logged once at attach);
    ``none`` refuses the attach with the reason."""

    @field_validator("scratch_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)

    def options(self) -> RdmaOptions:
        return RdmaOptions(
            device="" if self.device == "auto" else self.device,
            port=self.port,
            gid_index=-1 if self.gid_index == "auto" else self.gid_index,
            hop_limit=self.hop_limit,
            traffic_class=self.traffic_class,
            service_level=self.service_level,
            qps_per_node=self.qps_per_node,
            scratch_bytes=self.scratch_size,
        )


class RemoteTierConfig(BaseModel):
    """Client side of the remote DRAM pool (memory nodes found through ``metadata:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Remote DRAM pool on/off (needs memory nodes and ``metadata``)."""
    engine: Literal["tcp", "local", "rdma"] = "tcp"
    """Transport: tcp anywhere; local when nodes share this host (/dev/shm); rdma with pyverbs
    (nodes need ``node.rdma_device``; see ``rdma``)."""
    rdma: RdmaClientConfig = RdmaClientConfig()
    """RDMA port settings and fallback (engine: rdma)."""
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
