"""The same pages through ``aiofiles`` (the aiofiles leg of ``bench ssd``; underscore: a helper,
not a ``bench`` target).

aiofiles is the asyncio idiom for file I/O: each ``await f.write(...)`` / ``await
f.readinto(...)`` runs the ordinary buffered call on the event loop's thread pool. It has no
positional or vectored calls, so each task keeps a file object of its own and does seek + write
(seek + readinto) per page, ``TASKS`` tasks at once (the SSD tier's I/O thread count), each batch
of pages split between them. Writes go through the page cache, and the set leg ends with an
``fsync`` of the file (timed: the bytes are on the disk, as fio's O_DIRECT writes and the SSD
tier's are); gets read the pages back into the host pool's own memory (``readinto`` the page's
parts: no extra copy in Python), the page cache dropped first when the run drops it.

Every page is stamped before its set and every page read back is compared with the stamp,
outside the timed calls (as for the other legs of ``bench ssd``). A short read is a missed page,
never counted as served.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from hicache_mooncake.tools.bench._sglang_io import PageStamps, Timed

TASKS = 4


def _page_offsets(batch: int, b: int, n: int, page_bytes: int) -> list[int]:
    return [(b * batch + j) * page_bytes for j in range(n)]


async def _open_all(path: str, n: int) -> list[Any]:
    import aiofiles

    return [await aiofiles.open(path, "r+b") for _ in range(n)]


async def _close_all(files: list[Any]) -> None:
    for f in files:
        await f.close()


async def _set(
    path: str, batches: list[list[str]], batch: int, src: Any, stamps: PageStamps, tags: Callable[..., int]
) -> Timed:
    import aiofiles.os

    out = Timed()
    files = await _open_all(path, TASKS)
    try:
        for b, keys in enumerate(batches):
            stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
            pages = stamps.parts(src, len(keys))
            page_bytes = sum(len(p) for p in pages[0])
            offsets = _page_offsets(batch, b, len(keys), page_bytes)

            async def write(
                task: int, f: Any, pages: list[list[Any]] = pages, offsets: list[int] = offsets
            ) -> int:
                done = 0
                for j in range(task, len(pages), TASKS):
                    await f.seek(offsets[j])
                    for part in pages[j]:
                        await f.write(memoryview(part))
                    done += 1
                return done

            c0, t0 = time.process_time(), time.perf_counter()
            counts = await asyncio.gather(*(write(i, f) for i, f in enumerate(files)))
            out.seconds += time.perf_counter() - t0
            out.cpu_seconds += time.process_time() - c0
            out.ok_pages += sum(counts)
        c0, t0 = time.process_time(), time.perf_counter()
        for f in files:
            await f.flush()
        await aiofiles.os.wrap(os.fsync)(files[0].fileno())
        out.seconds += time.perf_counter() - t0
        out.cpu_seconds += time.process_time() - c0
    finally:
        await _close_all(files)
    return out


async def _get(
    path: str,
    batches: list[list[str]],
    batch: int,
    src: Any,
    dst: Any,
    stamps: PageStamps,
    tags: Callable[..., int],
) -> Timed:
    out = Timed()
    files = await _open_all(path, TASKS)
    try:
        for b, keys in enumerate(batches):
            pages = stamps.parts(dst, len(keys))
            page_bytes = sum(len(p) for p in pages[0])
            offsets = _page_offsets(batch, b, len(keys), page_bytes)
            served = [False] * len(keys)

            async def read(
                task: int, f: Any, pages: list[list[Any]] = pages, offsets: list[int] = offsets,
                served: list[bool] = served,
            ) -> None:  # fmt: skip
                for j in range(task, len(pages), TASKS):
                    await f.seek(offsets[j])
                    whole = True
                    for part in pages[j]:
                        whole = await f.readinto(memoryview(part)) == len(part) and whole
                    served[j] = whole

            c0, t0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(read(i, f) for i, f in enumerate(files)))
            out.seconds += time.perf_counter() - t0
            out.cpu_seconds += time.process_time() - c0
            out.ok_pages += sum(served)
            stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
            out.bad_pages += stamps.mismatches(src, dst, len(keys), served)
    finally:
        await _close_all(files)
    return out


def aiofiles_set(
    path: str, batches: list[list[str]], batch: int, src: Any, stamps: PageStamps, tags: Callable[..., int]
) -> Timed:
    """Write every batch's pages of ``src`` (stamped first with ``tags(batch_index, j)``) into a
    fresh file at ``path``, page ``b * batch + j`` at its own offset, then ``fsync`` it."""
    with open(path, "wb"):
        pass
    return asyncio.run(_set(path, batches, batch, src, stamps, tags))


def aiofiles_get(
    path: str,
    batches: list[list[str]],
    batch: int,
    src: Any,
    dst: Any,
    stamps: PageStamps,
    tags: Callable[..., int],
) -> Timed:
    """Read back what :func:`aiofiles_set` wrote, batch by batch into ``dst``; after each batch
    (untimed) ``src`` is stamped as it was for its set and every page read is compared."""
    return asyncio.run(_get(path, batches, batch, src, dst, stamps, tags))
