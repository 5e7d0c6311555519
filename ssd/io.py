"""Low-level I/O: O_DIRECT probing, aligned buffers, full vectored reads/writes, the I/O pool.

* ``os.preadv`` / ``os.pwritev`` release the GIL, so a small thread pool gives real queue depth.
* O_DIRECT needs 4096-aligned file offsets, buffer addresses and lengths; buffers from
  :func:`aligned_buffer` (anonymous mmap, page aligned) always qualify, caller memory is checked
  with :func:`is_aligned` and goes through a bounce buffer when it does not.
* :func:`preadv_full` / :func:`pwritev_full` retry short transfers; a read that hits end of file
  returns the byte count it got (the caller treats missing bytes as a miss), a write error
  raises ``OSError`` (the caller turns it into ``False``).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from hicache_mooncake.native.memory import populate

from .format import BLOCK

T = TypeVar("T")

O_DIRECT: int = getattr(os, "O_DIRECT", 0)
try:
    IOV_MAX = int(os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError, AttributeError):
    IOV_MAX = 1024
IOV_MAX = max(16, min(IOV_MAX, 1024))


def probe_direct_io(directory: str) -> tuple[bool, str]:
    """Whether ``directory``'s filesystem accepts an aligned O_DIRECT write+read (and why not)."""
    if not O_DIRECT:
        return False, "O_DIRECT not available on this platform"
    path = os.path.join(directory, f".direct-probe-{os.getpid()}")
    buf = aligned_buffer(BLOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | O_DIRECT, 0o600)
    except OSError as e:
        return False, f"open(O_DIRECT) failed: {e.strerror}"
    try:
        os.pwrite(fd, buf, 0)
        os.preadv(fd, [buf], 0)
        return True, "O_DIRECT accepted"
    except OSError as e:
        return False, f"O_DIRECT I/O failed: {e.strerror}"
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


def aligned_buffer(size: int) -> mmap.mmap:
    """Page-aligned anonymous memory of ``size`` bytes rounded up to 4096 (zero filled)."""
    return mmap.mmap(-1, max(BLOCK, (size + BLOCK - 1) // BLOCK * BLOCK))


HUGE_PAGE = 2 << 20


def huge_buffer(size: int) -> memoryview:
    """``size`` bytes (rounded up to 2 MiB) of anonymous memory starting on a 2 MiB boundary and
    backed by transparent huge pages where the kernel gives them (``madvise(MADV_HUGEPAGE)``,
    THP ``enabled`` = ``always`` or ``madvise``), faulted in now (GIL released:
    ``native.populate``). A block device takes a request from huge pages as a few long
    segments instead of one per 4 KiB page, which is what lets an O_DIRECT request run at the
    disk's speed; without THP it is ordinary page-aligned memory. The view keeps its mapping
    alive."""
    size = max(HUGE_PAGE, -(-size // HUGE_PAGE) * HUGE_PAGE)
    raw = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = (-address_of(memoryview(raw))) % HUGE_PAGE
    advise = getattr(raw, "madvise", None)
    hugepage = getattr(mmap, "MADV_HUGEPAGE", None)
    if advise is not None and hugepage is not None:
        with contextlib.suppress(OSError):
            advise(hugepage, start, size)
    view = memoryview(raw)[start : start + size]
    try:
        populate(view)
    except OSError:  # no such advice, or not backed now: the first writes fault the pages in
        np.frombuffer(view, dtype=np.uint8)[::BLOCK] = 0
    return view


def copy_into(dst: memoryview, src: memoryview) -> None:
    """``dst[:] = src`` as raw bytes, keeping the GIL: giving it up per copy (numpy's copy does)
    costs up to a switch interval (5 ms) each time another thread runs Python, as SGLang's
    scheduler thread does (a memcpy either way)."""
    byte_view(dst)[:] = byte_view(src)


def byte_view(buf: Any) -> memoryview:
    """A flat unsigned-byte view of any C-contiguous buffer (no copy)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def address_of(mv: memoryview) -> int:
    """Address of the first byte of ``mv`` (0 for empty views)."""
    if mv.nbytes == 0:
        return 0
    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)


def is_aligned(mv: memoryview, align: int = BLOCK) -> bool:
    return mv.nbytes % align == 0 and address_of(mv) % align == 0


def _advance(bufs: list[memoryview], n: int) -> list[memoryview]:
    out: list[memoryview] = []
    for b in bufs:
        if n >= b.nbytes:
            n -= b.nbytes
            continue
        out.append(b[n:] if n else b)
        n = 0
    return out


def split_iov(bufs: Sequence[memoryview], chunk: int) -> list[tuple[int, list[memoryview]]]:
    """Cut the byte stream ``bufs`` into pieces of about ``chunk`` bytes (a multiple of
    ``BLOCK``, so O_DIRECT offsets stay aligned); returns ``(offset in the stream, iovecs)``
    per piece. Views are sliced, never copied."""
    step = max(BLOCK, chunk // BLOCK * BLOCK)
    pieces: list[tuple[int, list[memoryview]]] = []
    cur: list[memoryview] = []
    start = pos = 0
    for b in bufs:
        off = 0
        n = b.nbytes
        while off < n:
            take = min(n - off, start + step - pos)
            cur.append(b[off : off + take] if (off or take != n) else b)
            off += take
            pos += take
            if pos - start >= step:
                pieces.append((start, cur))
                cur, start = [], pos
    if cur:
        pieces.append((start, cur))
    return pieces


def preadv_full(fd: int, bufs: Sequence[memoryview], offset: int) -> int:
    """Fill ``bufs`` from ``offset``; returns bytes read (less than asked only at end of file)."""
    total = 0
    pending = [b for b in bufs if b.nbytes]
    while pending:
        batch = pending[:IOV_MAX]
        want = sum(b.nbytes for b in batch)
        try:
            n = os.preadv(fd, batch, offset + total)
        except InterruptedError:
            continue
        if n <= 0:
            break
        total += n
        pending = _advance(pending, n)
        if n < want and n % BLOCK:
            # A short read not on a block boundary is end of file (O_DIRECT cannot resume there).
            break
    return total


def pwritev_full(fd: int, bufs: Sequence[memoryview], offset: int) -> int:
    """Write all of ``bufs`` at ``offset``; raises OSError (ENOSPC, EIO, ...) on failure."""
    total = 0
    pending = [b for b in bufs if b.nbytes]
    while pending:
        try:
            n = os.pwritev(fd, pending[:IOV_MAX], offset + total)
        except InterruptedError:
            continue
        if n <= 0:
            raise OSError(errno.EIO, "pwritev wrote nothing")
        total += n
        pending = _advance(pending, n)
    return total


class Cancelled(Exception):
    """A job of an abandoned :class:`IoBatch` that had not started (it did no I/O)."""


class IoBatch:
    """Jobs submitted together. ``results[i]`` is the job's return value or the exception it
    raised (:class:`Cancelled` when skipped after :meth:`abandon`). ``on_done(batch)`` runs
    exactly once, on the thread that finishes the last job, after every job has finished (or been
    skipped): the place to unpin what the jobs used, since a job can outlive an abandoned caller.
    """

    def __init__(self, fns: Sequence[Callable[[], Any]], on_done: Callable[[IoBatch], None] | None) -> None:
        self.fns = list(fns)
        self.results: list[Any] = [None] * len(fns)
        self.abandoned = False
        self._left = len(fns)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._on_done = on_done
        if not fns:
            self._finish()

    def run_job(self, i: int) -> None:
        try:
            self.results[i] = Cancelled() if self.abandoned else self.fns[i]()
        except BaseException as e:  # noqa: BLE001 - handed to the caller through results
            self.results[i] = e
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        try:
            if self._on_done is not None:
                self._on_done(self)
        finally:
            self._done.set()

    def wait(self, deadline: float | None) -> bool:
        """Wait until every job finished (True) or ``deadline`` (``time.monotonic()``) passed (False)."""
        if deadline is None:
            self._done.wait()
            return True
        # a far deadline (a caller's 'no limit') is capped where the platform's wait can take it
        return self._done.wait(min(max(0.0, deadline - time.monotonic()), threading.TIMEOUT_MAX))

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def abandon(self) -> None:
        """The caller gives up: jobs not started yet are skipped (running ones finish)."""
        self.abandoned = True

    def raise_first(self) -> None:
        for r in self.results:
            if isinstance(r, BaseException):
                raise r


URGENT, WRITE = 0, 1  # IoPool priorities: region opens and summaries, puts (gets: native pool)


class IoPool:
    """A fixed pool of daemon threads for blocking file I/O (GIL released inside the syscalls).

    Jobs wait in one queue per priority and a free thread takes the oldest job of the most
    urgent non-empty queue: region opens and other small control I/O (``URGENT``) never wait
    behind a batch of a put's writes (``WRITE``); a thread never stops a job it started. Gets
    read on the native I/O pool (``native.read_entries``), never behind these queues.

    Daemon threads, so a thread stuck in a syscall on a stalled disk never blocks interpreter
    exit or :meth:`shutdown`; callers bound their wait with a deadline (:meth:`IoBatch.wait`).
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._cond = threading.Condition(threading.Lock())
        self._queues: tuple[collections.deque[tuple[IoBatch, int] | None], ...] = tuple(
            collections.deque() for _ in (URGENT, WRITE)
        )
        self._workers = [
            threading.Thread(target=self._work, name=f"hicache-ssd-io-{i}", daemon=True)
            for i in range(threads)
        ]
        for t in self._workers:
            t.start()

    def _next(self) -> tuple[IoBatch, int] | None:
        with self._cond:
            while True:
                for q in self._queues:
                    if q:
                        return q.popleft()
                self._cond.wait()

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            batch, i = item
            batch.run_job(i)

    def submit(
        self,
        fns: Sequence[Callable[[], Any]],
        on_done: Callable[[IoBatch], None] | None = None,
        priority: int = URGENT,
    ) -> IoBatch:
        batch = IoBatch(fns, on_done)
        if fns:
            with self._cond:
                self._queues[priority].extend((batch, i) for i in range(len(fns)))
                self._cond.notify(len(fns))
        return batch

    def run_all(self, fns: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``fns`` on the pool and wait for all (no deadline); results in order.

        Exceptions propagate after every call has finished (nothing is left running)."""
        batch = self.submit(fns)
        batch.wait(None)
        batch.raise_first()
        return batch.results

    def shutdown(self, timeout_s: float = 1.0) -> None:
        """Stop the workers once the jobs already queued have run (the stop marks queue behind
        everything); waits at most ``timeout_s`` for them (they are daemons)."""
        with self._cond:
            self._queues[WRITE].extend(None for _ in self._workers)
            self._cond.notify_all()
        end = time.monotonic() + timeout_s
        for t in self._workers:
            t.join(max(0.0, end - time.monotonic()))


def run_with_deadline(fn: Callable[[], T], deadline: float | None, name: str) -> tuple[bool, T | None]:
    """Run ``fn`` on a daemon thread; ``(True, result)`` if it returned by ``deadline``, else
    ``(False, None)`` (it keeps running; its result is dropped). Exceptions propagate."""
    if deadline is None:
        return True, fn()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box.append((False, e))

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if not box:
        return False, None
    ok, value = box[0]
    if not ok:
        raise value
    return True, value
