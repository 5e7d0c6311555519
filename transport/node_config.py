"""The ``node:`` section of ``cluster.yaml`` (sizes are plain ints here; the CLI command parses
strings such as ``"4GiB"`` before validation)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from .wire import Limits


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_id: str = ""  # empty: "<host>:<port>"
    host: str = "127.0.0.1"  # loopback unless configured
    port: int = Field(default=7700, ge=0, le=65535)  # 0: any free port
    capacity: int = Field(default=1 << 30, ge=1 << 20)
    shm: bool = True  # arena in shared memory so same-host clients use the `local` transport
    shm_dir: str = "/dev/shm"
    eviction: str = "lru"
    secret_env: str = "HICACHE_NODE_SECRET"  # the shared secret is read from this variable
    secret_file: str = ""  # ... or from this file (wins when set)
    max_key_len: int = Field(default=1024, ge=1, le=65535)
    max_batch: int = Field(default=1024, ge=1)
    max_meta: int = Field(default=4 << 20, ge=4096)
    max_payload: int = Field(default=1 << 30, ge=4096)
    max_connections: int = Field(default=256, ge=1)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    handshake_timeout_s: float = Field(default=5.0, gt=0)
    drain_timeout_s: float = Field(default=10.0, ge=0)
    rdma_device: str = ""  # e.g. "mlx5_0" or "rxe0": serve one-sided RDMA too (needs pyverbs)
    rdma_port: int = Field(default=1, ge=1)
    rdma_gid_index: int = Field(default=0, ge=0)
    ready_file: str = ""  # written with "host port" once listening (tests, supervisors)

    def limits(self) -> Limits:
        return Limits(self.max_key_len, self.max_batch, self.max_meta, self.max_payload)

    def secret(self) -> bytes:
        if self.secret_file:
            with open(self.secret_file, "rb") as f:
                return f.read().strip()
        return os.environ.get(self.secret_env, "").encode()
