"""The ``TransferEngine`` protocol: move bytes between local memory and a node's arena.

An engine addresses a remote segment (a node's arena) by byte offset. ``read``/``write`` take a
batch of ``(remote_offset, local_parts)``: the parts (memoryviews of local memory, e.g. the host
KV pool) are filled from / gathered into consecutive remote bytes starting at the offset. A batch
returns one flag per item; an engine never raises for a failed item. Which object lives where is
not the engine's business: ``NodeClient`` asks the node (LOOKUP / ALLOC / COMMIT) and validates the
object header around one-sided reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from .connection import ConnectionPool

Extent = tuple[int, Sequence[memoryview]]


@dataclass(frozen=True)
class Segment:
    """A node's arena as the handshake described it."""

    node_id: str
    host: str
    port: int
    size: int
    epoch: int
    shm_path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_handshake(cls, host: str, port: int, info: dict[str, Any]) -> Segment:
        return cls(
            str(info.get("node_id", f"{host}:{port}")),
            host,
            port,
            int(info.get("arena_size", 0)),
            int(info.get("epoch", 0)),
            str(info.get("shm_path", "")),
            {k: v for k, v in info.items() if k not in ("node_id", "arena_size", "epoch", "shm_path")},
        )


class TransferEngine(Protocol):
    name: ClassVar[str]
    #: True: data moves without the node's CPU (shared memory, RDMA); objects are validated by
    #: their header. False: the node copies (tcp); ``NodeClient`` then uses keyed GET/PUT frames.
    one_sided: ClassVar[bool]

    def register_memory(self, buf: memoryview) -> int:
        """Register a local region that later parts will point into; returns a handle."""
        ...

    def unregister_memory(self, handle: int) -> None: ...

    def open_segment(self, segment: Segment, pool: ConnectionPool) -> None:
        """Prepare to move data to/from ``segment`` (map it, connect QPs, ...); raises
        ``TransportError`` when this engine cannot reach it."""
        ...

    def close_segment(self, node_id: str) -> None: ...

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]: ...

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]: ...

    def close(self) -> None: ...
