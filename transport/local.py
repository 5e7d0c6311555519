"""The ``local`` engine: same-host fast path. The node's arena is a file in its shm directory;
the client maps it and moves a batch's bytes in one native call (``native.copy_slots``: one GIL
release per batch, every part and range bounds-checked natively before a byte moves).
Reads are validated by the object header (``NodeClient``), writes go only into slots the node
reserved (ALLOC) and become visible on COMMIT.

A new mapping is faulted in from a background thread (``native.prefault.ArenaPrefault``: the
page-table entries only, never a byte changed, the GIL released), front to back: a process's first
copy into or out of a slot would otherwise take a page fault per 4 KiB (at 64 KiB pages that
doubled a put's copy here). Copies meanwhile are correct either way; closing the mapping stops the
fault-in first (within one 2 MiB piece).

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

import numpy as np

from hicache_mooncake.native import copy_slots, page_sizes
from hicache_mooncake.native.prefault import ArenaPrefault

from .arena_files import ArenaRefused, open_node_arena
from .arena_header import TOKEN_LEN, ArenaHeader
from .connection import ConnectionPool
from .engine import Extent, Segment
from .errors import PeerUnavailable
from .registry import register_engine


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
        self.prefault = ArenaPrefault(np.frombuffer(self.mm, np.uint8), f"mapping of node {segment.node_id}")

    def close(self) -> None:
        self.prefault.stop()
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
        # native_copies: copy_slots calls (one per batch)
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
        """One native copy for the whole batch (``native.copy_slots``): the items whose extent
        lies inside the arena, if the deadline has not passed; the others fail. A part the copy
        refuses (not one C-contiguous buffer; read-only where a read writes) fails the batch
        before a byte moves."""
        m = self._maps.get(node_id)
        if m is None:
            return [False] * len(items)
        pages = [parts for _, parts in items]
        try:
            sizes = page_sizes(pages)
        except (TypeError, ValueError, BufferError):  # not buffers at all
            self.errors += 1
            return [False] * len(items)
        out = [off >= 0 and off + n <= m.size for (off, _), n in zip(items, sizes, strict=True)]
        if time.monotonic() > deadline:
            return [False] * len(items)
        if all(out):
            offsets = [off for off, _ in items]
        else:
            offsets = [items[i][0] for i, ok in enumerate(out) if ok]
            pages = [pages[i] for i, ok in enumerate(out) if ok]
        try:
            copy_slots(m.view, offsets, pages, write)
        except (TypeError, ValueError, BufferError):  # refused before a byte moved
            self.errors += 1
            return [False] * len(items)
        self.counters["native_copies"] += 1
        return out

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, write=False)

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, write=True)

    def close(self) -> None:
        for node_id in list(self._maps):
            self.close_segment(node_id)
