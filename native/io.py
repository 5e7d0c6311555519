"""Batch file I/O on native workers, with a deadline the caller never waits past.

``pread_batch`` / ``pwrite_batch`` move ``lengths[i]`` bytes between ``buf[buf_offsets[i]:]``
and the file at ``file_offsets[i]`` for every i, in one call: the GIL is released once, native
workers do the syscalls (on the call's own dup of ``fd``), and the call returns by ``timeout_s``.
Results are per item, never exceptions: bytes done (short only at end of file) or ``-errno``;
``-ETIMEDOUT`` for an item not done by the deadline. Invariants:

* After the call returned, nothing writes into ``buf`` and nothing reads it: reads land in
  native aligned staging and are copied into ``buf`` only while the call is live; writes are
  copied out of ``buf`` into staging while the call is live.
* A write that timed out may still reach the file later (its outcome is unknown); an item that
  had not started by the deadline never runs. ``timeout_s <= 0`` starts nothing.
* O_DIRECT files work with any ``buf`` alignment (the staging is 4096-aligned); the file offsets
  and lengths must then be aligned as the file system requires (else that item's ``-EINVAL``).

Bad arguments (bounds, dtypes, a negative fd) raise before any I/O; OSError when the fd cannot
be duplicated or no worker can start.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import _core
from ._arrays import as_u64

I64Array = npt.NDArray[np.int64]


def _batch(
    write: bool, fd: int, buf: Any, buf_offsets: Any, lengths: Any, file_offsets: Any, timeout_s: float
) -> I64Array:
    b = as_u64("buf_offsets", buf_offsets)
    out = np.empty(b.size, dtype=np.int64)
    call = _core.pwrite_batch if write else _core.pread_batch
    call(fd, buf, b, as_u64("lengths", lengths), as_u64("file_offsets", file_offsets), float(timeout_s), out)
    return out


def pread_batch(
    fd: int, buf: Any, buf_offsets: Any, lengths: Any, file_offsets: Any, timeout_s: float
) -> I64Array:
    """Reads every item into the writable ``buf``; result[i] = bytes read or -errno."""
    return _batch(False, fd, buf, buf_offsets, lengths, file_offsets, timeout_s)


def pwrite_batch(
    fd: int, buf: Any, buf_offsets: Any, lengths: Any, file_offsets: Any, timeout_s: float
) -> I64Array:
    """Writes every item from ``buf``; result[i] = bytes written or -errno."""
    return _batch(True, fd, buf, buf_offsets, lengths, file_offsets, timeout_s)


def set_io_threads(n: int) -> None:
    """Grows the process-wide I/O worker pool to ``n`` threads (1..256; it never shrinks)."""
    _core.set_io_threads(n)


def io_threads() -> int:
    """The I/O worker pool's size (8 unless grown)."""
    return _core.io_threads()


def io_late_items() -> tuple[int, int]:
    """(reads that finished after their call's deadline, discarded; writes that finished after
    their call's deadline), counted since the process started: what a stalled disk left behind."""
    return _core.io_late_items()
