"""The ``node:`` section of ``cluster.yaml`` (sizes are plain ints here; the CLI command parses
strings such as ``"4GiB"`` before validation)."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..object_header import HEADER_SIZE
from ..rdma.options import RdmaOptions
from ..secret_file import read_secret_file
from ..wire import Limits


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    node_id: str = Field(default="", max_length=256)
    """Node name in the membership; empty: ``<host>:<port>``. Also names its shm arena: at start the
    node removes arenas that a dead earlier process with this id left in ``shm_dir``."""
    host: str = "127.0.0.1"
    """Loopback unless configured. Beyond loopback a shared secret is required (see allow_unauthenticated)."""
    port: int = Field(default=7700, ge=0, le=65535)
    """0: any free port"""
    unix_socket: str = ""
    """Listen on this Unix domain socket path instead of ``host:port`` (created 0600; only peers of
    the same user or root are served, checked by their kernel credentials; no secret needed)."""
    capacity: int = Field(default=1 << 30, ge=1 << 20)
    """DRAM this node contributes to the pool (page-aligned mmap arena)."""
    slab_size: int = Field(default=64 << 20, ge=1 << 16)
    """Arena granule given to one object size class (the DRAM tier's slabs): the largest object
    the node stores. Capped at ``capacity``; a node serving several page sizes needs one slab per
    size at least. Clients of the pool cut larger pages into chunks by the value in their own
    file's ``node:`` section (the default without one): keep it the same on nodes and clients."""
    shm: bool = True
    """Arena in shared memory so same-host clients use the `local` transport"""
    shm_dir: str = "/dev/shm"
    """Where the shared-memory arena file lives."""
    eviction: str = "lru"
    """The node store's policy: lru, or any ``tiers.policy`` name (s3fifo, reuse, ...)."""
    secret_env: str = "HICACHE_NODE_SECRET"
    """The shared secret is read from this variable"""
    secret_file: str = ""
    """... or from this file (wins when set)"""
    allow_unauthenticated: bool = False
    """Run without a shared secret although ``host`` is reachable beyond loopback (warned at every
    start). Without it such a node refuses to start."""
    max_key_len: int = Field(default=1024, ge=1, le=65535)
    """Longest key accepted (bytes); longer requests are refused."""
    max_batch: int = Field(default=1024, ge=1)
    """Objects per request accepted."""
    max_meta: int = Field(default=4 << 20, ge=4096)
    """Largest request metadata section (bytes)."""
    max_payload: int = Field(default=1 << 30, ge=4096)
    """Largest payload per frame (bytes)."""
    max_connections: int = Field(default=256, ge=1)
    """Authenticated connections served at once (one thread each); when full, the longest-idle one
    is closed to make room for a new one."""
    idle_timeout_s: float = Field(default=300.0, gt=0)
    """An idle connection is closed after this."""
    handshake_timeout_s: float = Field(default=2.0, gt=0)
    """A socket that does not authenticate within this is dropped (handshakes cost no thread)."""
    max_handshakes: int = Field(default=256, ge=1)
    """Unauthenticated sockets held at once; when full, the oldest of the peer holding most is dropped."""
    max_handshakes_per_peer: int = Field(default=32, ge=1)
    """Unauthenticated sockets held per peer address (IPv6: per /64); when full, its oldest is dropped."""
    request_timeout_s: float = Field(default=10.0, gt=0)
    """Once a request's header arrived, its metadata and body must arrive (and its reply leave)
    within this; else the connection is closed and the space reserved for it released. A PUT
    reserves space only once its body starts to arrive."""
    drain_timeout_s: float = Field(default=10.0, ge=0)
    """On SIGTERM: finish in-flight requests for at most this long."""
    rdma_device: str = ""
    """E.g. ``mlx5_0`` or ``rxe0`` (``auto``: the first device): serve one-sided RDMA too (needs
    pyverbs + rdma-core); empty: no RDMA. A device that cannot be opened stops the node."""
    rdma_port: int = Field(default=1, ge=1)
    """Port of ``rdma_device``."""
    rdma_gid_index: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    """GID table index; ``auto``: the first RoCE v2 GID with an IPv4 address (index 0 on IB)."""
    rdma_hop_limit: int = Field(default=64, ge=1, le=255)
    """IP hop limit of RoCE v2 packets (1 would stop them at the first router)."""
    rdma_traffic_class: int = Field(default=0, ge=0, le=255)
    """Traffic class (DSCP << 2 | ECN), e.g. 106 for a fabric's lossless RoCE class."""
    rdma_service_level: int = Field(default=0, ge=0, le=15)
    """Service level (InfiniBand; the PCP priority on some RoCE setups)."""
    ready_file: str = ""
    """Written with "host port" once listening (tests, supervisors)"""

    def rdma_options(self) -> RdmaOptions:
        return RdmaOptions(
            device=self.rdma_device,
            port=self.rdma_port,
            gid_index=-1 if self.rdma_gid_index == "auto" else self.rdma_gid_index,
            hop_limit=self.rdma_hop_limit,
            traffic_class=self.rdma_traffic_class,
            service_level=self.rdma_service_level,
        )

    def limits(self) -> Limits:
        return Limits(self.max_key_len, self.max_batch, self.max_meta, self.max_payload)

    @property
    def arena_slab_bytes(self) -> int:
        """The slab the node's store uses: ``slab_size``, capped at the capacity (one slab at
        least)."""
        return min(self.slab_size, self.capacity // 4096 * 4096)

    @property
    def max_object_bytes(self) -> int:
        """The largest object the node stores: a slab less the object header its one-sided
        readers check, and no more than one request's payload."""
        return min(self.arena_slab_bytes - HEADER_SIZE, self.max_payload)

    def secret(self) -> bytes:
        if self.secret_file:  # ValueError naming node.secret_file when it cannot be read
            return read_secret_file(self.secret_file, "node.secret_file")
        return os.environ.get(self.secret_env, "").encode()
