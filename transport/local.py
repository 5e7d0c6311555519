"""The ``local`` engine: same-host fast path. The node's arena is a file in its shm directory;
the client maps it and moves a batch's bytes in one native copy per local buffer (``batch_copy``:
SGLang's host pool is one or two buffers, so one GIL release per batch, bounds checked natively).
Reads are validated by the object header (``NodeClient``), writes go only into slots the node
reserved (ALLOC) and become visible on COMMIT.

The client maps only what it can prove is the node's arena (``arena_files.open_node_arena``): a
file in ITS configured directory (``ClientOptions.shm_dir``), opened without following links and
never created or truncated, a regular file owned by this user, whose arena header names the node
id, epoch, size and token of the authenticated handshake. Anything else is refused before a byte
is written. A batch past its deadline moves no more bytes."""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from .arena_files import ArenaRefused, open_node_arena
from .arena_header import TOKEN_LEN, ArenaHeader
from .batch_copy import copy_into, copy_out
from .connection import ConnectionPool
from .engine import Extent, Segment
from .errors import PeerUnavailable
from .registry import register_engine
from .sockio import as_bytes_view


def _expected_header(segment: Segment) -> ArenaHeader:
    try:
        token = bytes.fromhex(str(segment.extra.get("arena_token", "")))
    except ValueError:
        token = b""
    if len(token) != TOKEN_LEN:
        raise PeerUnavailable(f"node {segment.node_id} announced no valid arena token")
    return ArenaHeader(segment.node_id, segment.epoch, segment.size, 0, token)


class _Mapping:
    def __init__(self, segment: Segment, shm_dir: str) -> None:
        size = segment.size
        try:
            fd = open_node_arena(shm_dir, segment.shm_path, _expected_header(segment), os.geteuid())
        except ArenaRefused as exc:
            raise PeerUnavailable(f"refusing to map the arena of node {segment.node_id}: {exc}") from None
        try:
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.view = memoryview(self.mm)
        self.size = size
        self.epoch = segment.epoch

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
        # native_copies: copy_pages calls (one per local buffer per batch); python_copied_parts:
        # parts that could not be located in a writable buffer (copied under the GIL)
        self.counters: Counter[str] = Counter()

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
            new = _Mapping(segment, pool.opts.shm_dir)
        except OSError as exc:
            raise PeerUnavailable(f"cannot map {segment.shm_path}: {exc} (not on this host?)") from exc
        if cur is not None:
            cur.close()
        self._maps[segment.node_id] = new

    def close_segment(self, node_id: str) -> None:
        m = self._maps.pop(node_id, None)
        if m is not None:
            m.close()

    def _run(self, node_id: str, items: Sequence[Extent], deadline: float, write: bool) -> list[bool]:
        """One native copy per local buffer for the whole batch (``batch_copy``): the items whose
        extent lies inside the arena, if the deadline has not passed; the others fail."""
        m = self._maps.get(node_id)
        if m is None:
            return [False] * len(items)
        out = [False] * len(items)
        views: list[memoryview] = []
        offsets: list[int] = []
        for i, (off, parts) in enumerate(items):
            mine = [as_bytes_view(p) for p in parts]
            total = sum(v.nbytes for v in mine)
            if off < 0 or off + total > m.size:
                continue
            for v in mine:
                views.append(v)
                offsets.append(off)
                off += v.nbytes
            out[i] = True
        if time.monotonic() > deadline:
            return [False] * len(items)
        try:
            where = (copy_into if write else copy_out)(m.view, offsets, views)
        except ValueError:  # refused before a byte moved (a view located outside its buffer)
            self.errors += 1
            return [False] * len(items)
        self.counters["native_copies"] += len(where.groups)
        self.counters["python_copied_parts"] += len(where.loose)
        return out

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, write=False)

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, write=True)

    def close(self) -> None:
        for node_id in list(self._maps):
            self.close_segment(node_id)
