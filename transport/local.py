"""The ``local`` engine: same-host fast path. The node's arena is a file in ``/dev/shm``; the
client maps it and moves bytes with memoryview slice assignment (one memcpy in C, no Python
loop). Reads are validated by the object header (``NodeClient``), writes go only into slots the
node reserved (ALLOC) and become visible on COMMIT."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from typing import ClassVar

from .connection import ConnectionPool
from .engine import Extent, Segment
from .errors import PeerUnavailable
from .registry import register_engine
from .sockio import as_bytes_view


class _Mapping:
    def __init__(self, path: str, size: int, epoch: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < size:
                raise PeerUnavailable(f"{path} is smaller than the advertised arena")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.view = memoryview(self.mm)
        self.size = size
        self.epoch = epoch

    def close(self) -> None:
        self.view.release()
        with contextlib.suppress(BufferError):
            self.mm.close()


@register_engine
class LocalEngine:
    name: ClassVar[str] = "local"
    one_sided: ClassVar[bool] = True

    def __init__(self) -> None:
        self._maps: dict[str, _Mapping] = {}
        self.errors = 0

    def register_memory(self, buf: memoryview) -> int:
        return 0

    def unregister_memory(self, handle: int) -> None:
        pass

    def open_segment(self, segment: Segment, pool: ConnectionPool) -> None:
        cur = self._maps.get(segment.node_id)
        if cur is not None and cur.epoch == segment.epoch:
            return
        if not segment.shm_path:
            raise PeerUnavailable(f"node {segment.node_id} exports no shared-memory arena")
        try:
            new = _Mapping(segment.shm_path, segment.size, segment.epoch)
        except OSError as exc:
            raise PeerUnavailable(f"cannot map {segment.shm_path}: {exc} (not on this host?)") from exc
        if cur is not None:
            cur.close()
        self._maps[segment.node_id] = new

    def close_segment(self, node_id: str) -> None:
        m = self._maps.pop(node_id, None)
        if m is not None:
            m.close()

    def _run(self, node_id: str, items: Sequence[Extent], write: bool) -> list[bool]:
        m = self._maps.get(node_id)
        if m is None:
            return [False] * len(items)
        out = []
        for off, parts in items:
            views = [as_bytes_view(p) for p in parts]
            total = sum(len(v) for v in views)
            if off < 0 or off + total > m.size:
                out.append(False)
                continue
            pos = off
            for v in views:
                n = len(v)
                if write:
                    m.view[pos : pos + n] = v
                else:
                    v[:] = m.view[pos : pos + n]
                pos += n
            out.append(True)
        return out

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, write=False)

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, write=True)

    def close(self) -> None:
        for node_id in list(self._maps):
            self.close_segment(node_id)
