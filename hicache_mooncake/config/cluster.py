"""Cluster sections of the YAML: the client's ``tiers.remote``, plus ``node:`` and ``metadata:``
(read by ``hicache-mooncake node``; validated here too, so one file serves both sides and a bad
key in it is refused wherever the file is loaded)."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hicache_mooncake.sizes import parse_size
from hicache_mooncake.tiers.pool_providers.mooncake_config import MooncakeConfig
from hicache_mooncake.transport.metadata import MetadataConfig
from hicache_mooncake.transport.node.config import NodeConfig
from hicache_mooncake.transport.rdma.options import RdmaOptions
from hicache_mooncake.transport.secret_file import read_secret_file

from .metrics import ExporterConfig

__all__ = ["MetadataConfig", "MooncakeSection", "NodeSection", "RdmaClientConfig", "RemoteTierConfig"]


class NodeSection(NodeConfig):
    """``NodeConfig`` with sizes accepted as strings (``"4GiB"``), plus the node's metrics endpoint."""

    metrics: ExporterConfig = ExporterConfig()
    """The node's own ``/metrics`` and ``/healthz`` (``hicache-mooncake node --metrics-port`` overrides
    the port)."""

    @field_validator("capacity", "slab_size", "max_meta", "max_payload", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)


class MooncakeSection(MooncakeConfig):
    """``MooncakeConfig`` with sizes accepted as strings (``"4GiB"``)."""

    @field_validator("segment_size", "local_buffer_size", mode="before")
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
    """Client side of the remote DRAM pool, shared by every instance: our memory nodes (found
    through ``metadata:``) or a Mooncake Store cluster (``mooncake:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Remote DRAM pool on/off (needs memory nodes and ``metadata``, or a Mooncake cluster)."""
    provider: Literal["nodes", "mooncake"] = "nodes"
    """What stores the pool: ``nodes`` (our memory nodes: one host's shared tier, small clusters) or
    ``mooncake`` (Mooncake Store: replicas, master HA, RDMA; settings under ``mooncake:``)."""
    engine: Literal["tcp", "local", "rdma"] = "tcp"
    """nodes: transport: tcp anywhere; local when nodes share this host (/dev/shm); rdma with pyverbs
    (nodes need ``node.rdma_device``; see ``rdma``)."""
    rdma: RdmaClientConfig = RdmaClientConfig()
    """nodes: RDMA port settings and fallback (engine: rdma)."""
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
    allow_unauthenticated: bool = False
    """nodes: reach nodes beyond loopback without a shared secret (warned); otherwise such nodes are refused."""
    shm_dir: str = "/dev/shm"
    """nodes, engine local: map only node arenas in this directory (the nodes' ``node.shm_dir``)."""
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
        if self.secret_file:  # ValueError naming tiers.remote.secret_file when it cannot be read
            return read_secret_file(self.secret_file, "tiers.remote.secret_file")
        return os.environ.get(self.secret_env, "").encode()
