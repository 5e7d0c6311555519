"""What every metadata backend provides, and the records it stores."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from typing import Protocol


class ObjectDataType(enum.IntEnum):
    """What an object holds; same values as ``hicache_mooncake.tiers.policy.ObjectType``."""

    KV_PAGE = 0
    INDEX = 1
    CONFIG = 2
    SIDECAR = 3


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A memory node as members see it."""

    node_id: str
    host: str
    port: int
    capacity: int = 0
    epoch: int = 0  # start time in µs: a restarted node is a new epoch
    shm_path: str = ""
    max_object: int = 0  # the largest object it stores (``NodeConfig.max_object_bytes``); 0: not told

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> NodeInfo:
        raw = json.loads(text)
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


class MetadataService(Protocol):
    """Membership of memory nodes. Every call is bounded by the backend's timeout and raises
    ``MetadataUnavailable`` when the service cannot be reached."""

    def register_node(self, info: NodeInfo, ttl_s: float) -> None:
        """Add or refresh ``info`` for ``ttl_s`` seconds (a heartbeat is the same call)."""
        ...

    def deregister_node(self, node_id: str) -> None: ...

    def live_nodes(self) -> list[NodeInfo]:
        """Members whose last heartbeat has not expired, sorted by ``node_id``."""
        ...

    def ping(self) -> bool: ...

    def close(self) -> None: ...
