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

``read_entries`` reads SSD entries (``ssd/format.py``'s layout) in runs, checks each entry on
the worker that read it (header, generation, sequence, length, key, xxh3 of the payload: one
``EntryVerdict``) and copies the payload of every sound entry into its parts of ``dst``, only
while the call is live: one call, the GIL released once, for a whole get. ``write_entries`` is
its mirror for a whole put: the workers copy (or borrow), hash, lay out the headers and write;
writes still under way at the deadline come back as a :class:`WritesInFlight` to wait for
before the space they write to is reused.

Bad arguments (bounds, dtypes, a negative fd) raise before any I/O; OSError when the fd cannot
be duplicated or no worker can start.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import numpy.typing as npt

from . import _core
from ._arrays import U64Array, as_u64

if TYPE_CHECKING:
    from typing_extensions import Unpack

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


class EntryVerdict(enum.IntEnum):
    """What ``read_entries`` found for one entry (values from the extension; a negative result
    is instead ``-errno`` of the entry's read, ``-ETIMEDOUT`` when it was not done in time)."""

    OK = _core.ENTRY_OK  # sound and the key's: its payload is in dst
    SHORT = _core.ENTRY_SHORT  # the file ended inside it
    BAD_HEADER = _core.ENTRY_BAD_HEADER  # no entry magic, bad key length, header checksum, version
    STALE = _core.ENTRY_STALE  # a sound header of another write (dead, generation, seq, length)
    OTHER_KEY = _core.ENTRY_OTHER_KEY  # a sound entry of another key: a fingerprint collision
    BAD_PAYLOAD = _core.ENTRY_BAD_PAYLOAD  # the payload's xxh3 differs from the header's


class EntryRuns(TypedDict):
    """The runs of SSD entries a ``read_entries`` / ``write_entries`` call works on: run ``r`` is
    entries ``run_items[r]`` up to ``run_items[r + 1]``, back to back from ``run_offsets[r]`` of
    the file ``fds[r]``; entry ``k`` holds ``keys[k]`` with a payload of ``payload_lengths[k]``
    bytes written with generation ``gens[k]`` and sequence ``seqs[k]``, in its parts
    ``part_items[k]`` up to ``part_items[k + 1]``."""

    fds: Any
    run_offsets: Any
    run_items: Any
    payload_lengths: Any
    gens: Any
    seqs: Any
    keys: Sequence[bytes]
    part_items: Any


def _runs_args(
    runs: EntryRuns,
) -> tuple[I64Array, U64Array, U64Array, U64Array, U64Array, U64Array, U64Array, bytes, U64Array]:
    """The leading arguments both native calls take, as typed arrays (keys joined, with ends)."""
    keys = runs["keys"]
    return (
        np.ascontiguousarray(runs["fds"], dtype=np.int64),
        as_u64("run_offsets", runs["run_offsets"]),
        as_u64("run_items", runs["run_items"]),
        as_u64("payload_lengths", runs["payload_lengths"]),
        as_u64("gens", runs["gens"]),
        as_u64("seqs", runs["seqs"]),
        np.fromiter((len(k) for k in keys), np.uint64, len(keys)).cumsum(dtype=np.uint64),
        b"".join(keys),
        as_u64("part_items", runs["part_items"]),
    )


def read_entries(
    *,
    dst: Any,
    dst_offsets: Any,
    part_lengths: Any,
    max_key: int,
    timeout_s: float,
    **runs: Unpack[EntryRuns],
) -> I64Array:
    """Reads run ``r`` (entries ``run_items[r]`` up to ``run_items[r + 1]``, back to back from
    ``run_offsets[r]`` of the file ``fds[r]``: one worker per run, in requests of at most 1 MiB,
    on the call's own dup of the fd) and
    checks entry ``k`` against ``keys[k]``, ``payload_lengths[k]``, ``gens[k]`` and ``seqs[k]``;
    a sound entry's payload is copied into its parts ``part_items[k]`` up to ``part_items[k + 1]``
    (``dst[dst_offsets[q]:][:part_lengths[q]]``, in order; they sum to its payload length).
    ``max_key``: the longest key a header may name. Returns one result per entry: an
    :class:`EntryVerdict`, or ``-errno`` of its run's read (``-ETIMEDOUT``: not done by
    ``timeout_s``; ``timeout_s <= 0`` reads nothing). Only ``OK`` entries were written into
    ``dst``, and nothing is written after the call returned."""
    out = np.empty(len(runs["keys"]), dtype=np.int64)
    _core.read_entries(
        *_runs_args(runs),
        dst,
        as_u64("dst_offsets", dst_offsets),
        as_u64("part_lengths", part_lengths),
        int(max_key),
        float(timeout_s),
        out,
    )
    return out


class WritesInFlight:
    """The runs of a ``write_entries`` call still being written when it returned (its deadline
    passed after their payloads were taken). The caller keeps the space they write to reserved
    until :meth:`wait` says they ended; the call's source buffers stay exported until then."""

    __slots__ = ("_writes",)

    def __init__(self, writes: object) -> None:
        self._writes = writes

    def wait(self, timeout_s: float | None = None) -> bool:
        """Whether every write of the call has ended (the GIL released while waiting; ``None``:
        no limit)."""
        return bool(_core.write_wait(self._writes, 1e9 if timeout_s is None else float(timeout_s)))


def write_entries(
    *,
    srcs: Sequence[Any],
    part_srcs: Any,
    src_offsets: Any,
    part_lengths: Any,
    borrow: bool,
    timeout_s: float,
    **runs: Unpack[EntryRuns],
) -> tuple[I64Array, WritesInFlight | None]:
    """Writes run ``r`` (entries ``run_items[r]`` up to ``run_items[r + 1]``, back to back from
    ``run_offsets[r]`` of the file ``fds[r]``, in ``ssd/format.py``'s layout: one worker per run,
    on the call's own dup of the fd). Entry ``k`` holds ``keys[k]``, ``gens[k]``, ``seqs[k]`` and
    the payload of its parts ``part_items[k]`` up to ``part_items[k + 1]``
    (``srcs[part_srcs[q]][src_offsets[q]:][:part_lengths[q]]``, in order; they sum to
    ``payload_lengths[k]``); the worker computes its xxh3 and header. Staged, a run is copied with
    its headers into the worker's staging and written from there; with ``borrow`` the payloads
    are written in place (each entry's parts back to back in memory, aligned as the file
    needs) after header blocks from staging.

    Returns one result per run (bytes written, ``-errno``, ``-ETIMEDOUT`` when not done by
    ``timeout_s``; ``timeout_s <= 0`` writes nothing) and, when some runs were still being
    written at the deadline, their :class:`WritesInFlight` (else None). A run not started by the
    deadline never writes; no payload is read from ``srcs`` for a header or a staged copy after
    the call returned (a borrowed run's write may, from the exported buffers). Bad arguments
    (bounds, dtypes, a key longer than a header holds, borrowed parts not back to back) raise
    ValueError before any I/O."""
    out = np.empty(len(runs["fds"]), dtype=np.int64)
    writes = _core.write_entries(
        *_runs_args(runs),
        srcs,
        as_u64("part_srcs", part_srcs),
        as_u64("src_offsets", src_offsets),
        as_u64("part_lengths", part_lengths),
        bool(borrow),
        float(timeout_s),
        out,
    )
    return out, None if writes is None else WritesInFlight(writes)


STAGING_KEEP_BYTES: int = _core.STAGING_KEEP_BYTES
"""The largest staging buffer the I/O workers keep for the next job (larger ones are freed)."""


def reserve_io_staging(count: int, nbytes: int) -> int:
    """Makes the I/O workers' staging buffers now (the GIL released; faulted in, on huge pages
    where the kernel gives them) until ``count`` free ones of at least ``nbytes`` are kept (at
    most one per worker, each of at most ``STAGING_KEEP_BYTES``); returns how many were made.
    Without it the first calls fault their staging in (an SSD engine calls it at open)."""
    return int(_core.reserve_io_staging(count, min(nbytes, STAGING_KEEP_BYTES)))


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
