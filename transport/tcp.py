"""The ``tcp`` engine: address-based reads/writes of a node's arena over the framed protocol
(READ_AT / WRITE_AT), one round trip per batch. ``NodeClient`` uses keyed GET/PUT over the same
connections instead (one round trip, no header checks needed: the node pins what it sends)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

from . import wire
from .connection import ConnectionPool
from .engine import Extent, Segment
from .errors import TransportError
from .registry import register_engine
from .sockio import as_bytes_view


@register_engine
class TcpEngine:
    name: ClassVar[str] = "tcp"
    one_sided: ClassVar[bool] = False

    def __init__(self) -> None:
        self._pools: dict[str, ConnectionPool] = {}
        self.errors = 0

    def register_memory(self, buf: memoryview) -> int:
        return 0  # the kernel copies from any memory; nothing to register

    def unregister_memory(self, handle: int) -> None:
        pass

    def open_segment(self, segment: Segment, pool: ConnectionPool) -> None:
        self._pools[segment.node_id] = pool

    def close_segment(self, node_id: str) -> None:
        self._pools.pop(node_id, None)

    def _run(self, node_id: str, items: Sequence[Extent], deadline: float, write: bool) -> list[bool]:
        pool = self._pools.get(node_id)
        if pool is None or not items:
            return [False] * len(items)
        extents = [(off, sum(len(p) for p in parts)) for off, parts in items]
        parts = [as_bytes_view(p) for _, ps in items for p in ps]
        try:
            conn = pool.acquire(deadline)
        except TransportError:
            self.errors += 1
            return [False] * len(items)
        ok = False
        try:
            meta = wire.encode_extents(extents, conn.limits)
            op = wire.Op.WRITE_AT if write else wire.Op.READ_AT
            reply_meta = wire.reply_meta_size(op, len(items))
            if write:
                _, rmeta = conn.request_into(op, meta, reply_meta, (), deadline, parts)
            else:  # the reply carries every extent (zeros where one is not readable): one receive
                _, rmeta = conn.request_into(op, meta, reply_meta, parts, deadline)
            flags = wire.decode_flags(rmeta, len(items))
            ok = True
            return [bool(f) for f in flags]
        except (TransportError, OSError, TimeoutError):
            self.errors += 1
            return [False] * len(items)
        finally:
            pool.release(conn, ok)

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, write=False)

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, write=True)

    def close(self) -> None:
        self._pools.clear()


def _now() -> float:
    return time.monotonic()
