"""The ``tiers.remote.mooncake`` section: what an operator sets on a Mooncake Store client.

Sizes are plain ints here; the config package accepts strings such as ``"4GiB"`` on top
(``hicache_mooncake.config.cluster.MooncakeSection``). Forms the pinned wheel
(``mooncake-transfer-engine-non-cuda`` 0.3.13.post1) cannot serve are refused here, by name,
instead of failing inside Mooncake: its transfer metadata has no Redis plugin (a ``redis://``
metadata server aborts the whole process) and its master has no Redis HA backend.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

P2P = "P2PHANDSHAKE"
MASTER_SCHEMES = ("etcd",)
METADATA_SCHEMES = ("etcd", "http", "https")


class MooncakeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    master: str = "127.0.0.1:50051"
    """Mooncake master: ``host:port`` (one master), or the HA forms ``etcd://h1:p1;h2:p2`` (the
    masters run with ``--enable_ha --etcd_endpoints=...``; the client follows the elected leader)."""
    metadata_server: str = P2P
    """Transfer Engine metadata: ``P2PHANDSHAKE`` (no metadata service: peers exchange segment
    descriptors directly; recommended), ``etcd://h:p``, or ``http://h:p/metadata`` (the master's
    embedded HTTP metadata server, which listens on every interface: avoid)."""
    local_hostname: str = "127.0.0.1"
    """Address of this host that other Mooncake clients reach it by (its cluster IP; loopback only
    for a single host)."""
    protocol: Literal["tcp", "rdma"] = "tcp"
    """Transfer Engine transport."""
    device_names: str = ""
    """RDMA devices, comma separated (e.g. ``mlx5_0,mlx5_1``); empty: Mooncake's auto-discovery."""
    segment_size: int = Field(default=0, ge=0)
    """DRAM this instance contributes to the pool (a Mooncake segment); 0: a pure client that
    stores in the segments of other processes (segment holders, other instances)."""
    local_buffer_size: int = Field(default=16 << 20, ge=0)
    """Mooncake's client-side registered buffer. Pages inside SGLang's registered host pool never
    use it (zero copy); pages outside it (the legacy non-v1 path) are staged through it."""
    replica_num: int = Field(default=1, ge=1)
    """Copies of every page, on distinct segments: with 2, a segment holder's death loses nothing."""
    put_timeout_s: float | None = Field(default=None, gt=0)
    """Deadline of one batched put; default ``tiers.remote.timeout_s`` (may not exceed it)."""
    get_timeout_s: float | None = Field(default=None, gt=0)
    """Deadline of one batched get or exists query; default ``tiers.remote.timeout_s`` (may not
    exceed it)."""
    retry_interval_s: float = Field(default=1.0, gt=0)
    """While the pool is unreachable (master down, not yet connected) every call is a miss and the
    client retries (reconnects) at this interval."""

    @field_validator("master")
    @classmethod
    def _master(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if sep:
            if scheme == "redis":
                raise ValueError(
                    "redis:// master HA is not built into the pinned mooncake wheel (its master has "
                    "no Redis HA backend); use etcd://host:port[;host:port...]"
                )
            if scheme not in MASTER_SCHEMES or not rest:
                raise ValueError(f"expected host:port or {'|'.join(MASTER_SCHEMES)}://..., got {value!r}")
            return value
        _host_port(value)
        return value

    @field_validator("metadata_server")
    @classmethod
    def _metadata(cls, value: str) -> str:
        if value == P2P:
            return value
        scheme, sep, rest = value.partition("://")
        if scheme == "redis":
            raise ValueError(
                "redis:// transfer metadata is not built into the pinned mooncake wheel (it aborts the "
                "process); use P2PHANDSHAKE (recommended) or etcd://host:port"
            )
        if not sep or scheme not in METADATA_SCHEMES or not rest:
            raise ValueError(f"expected {P2P} or {'|'.join(METADATA_SCHEMES)}://..., got {value!r}")
        return value


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {value!r}")
    return host, int(port)
