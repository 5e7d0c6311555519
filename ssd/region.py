"""Regions: the unit of allocation, sequential writing and eviction.

A region is one preallocated file of ``region_size`` bytes. Its life cycle::

    FREE --(open for writing: allocate file, write header with a new gen)--> OPENING --> ACTIVE
    ACTIVE --(next batch does not fit)--> SEALED --(reclaim / clear)--> FREE
    any state with readers or writers in flight --(reclaim / clear)--> DRAINING --(pins reach 0)--> FREE

Invariants (all state changes happen under the engine lock; file I/O never does):

* ``writers`` counts reservations whose ``pwritev`` has not finished; ``readers`` counts gets
  that looked an entry up in this region and have not finished reading it. A region with either
  count above zero is never reopened for writing, so bytes are never overwritten under a reader
  or a writer (writes in flight are never evicted).
* ``gen`` changes only when the region is reopened; entries carry the gen they were written
  under, so entries of an older life are stale and ignored.
* ``write_off`` only grows while ACTIVE; every reservation lies inside ``[BLOCK, region_size)``.
* ``fps`` lists the fingerprint of every entry indexed into this generation (8 bytes each; some
  may since point elsewhere); ``names`` their keys in the same order while the region's summary
  is not on disk, None once it is (the keys are then read from it: :mod:`.names`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from array import array
from enum import Enum

import numpy as np

from .format import BLOCK, RegionHeader, region_file_name
from .io import O_DIRECT, aligned_buffer, pwritev_full
from .private_dir import FILE_MODE, O_NOFOLLOW


class RegionState(Enum):
    FREE = "free"
    OPENING = "opening"
    ACTIVE = "active"
    SEALED = "sealed"
    DRAINING = "draining"


class Region:
    __slots__ = (
        "rid", "dir_index", "path", "fd", "allocated", "state", "gen", "epoch", "write_off",
        "readers", "writers", "fps", "names", "untold", "alloc_retry_at", "unlink_when_free", "live_bytes", "dirty", "summarized",
    )  # fmt: skip

    def __init__(self, rid: int, dir_index: int, directory: str) -> None:
        self.rid = rid
        self.dir_index = dir_index
        self.path = f"{directory}{os.sep}{region_file_name(rid)}"
        self.fd: int | None = None
        self.allocated = False  # file exists with full size reserved
        self.state = RegionState.FREE
        self.gen = 0
        self.epoch = 0
        self.write_off = BLOCK
        self.readers = 0
        self.writers = 0
        self.fps = array("Q")  # fingerprints of the entries indexed into this generation
        self.names: list[str] | None = []  # their keys, until its summary is on disk (names.py)
        # dropped by a synchronous eviction, on_evict not yet told: (fps, gen, epoch) (names.py)
        self.untold: tuple[np.ndarray, int, int] | None = None
        self.alloc_retry_at = 0.0
        self.unlink_when_free = False
        self.live_bytes = 0
        self.dirty = False
        self.summarized = False  # its summary (summary.py) is written for this generation

    def add(self, fp: int, key: str, length: int) -> None:
        """One entry indexed into this generation (lock held)."""
        self.fps.append(fp)
        if self.names is not None:
            self.names.append(key)
        self.live_bytes += length

    def add_many(self, fps: np.ndarray, keys: list[str], nbytes: int) -> None:
        """Entries indexed into this generation at once: ``fps`` (uint64) and their ``keys``,
        ``nbytes`` payload bytes in all (lock held)."""
        self.fps.frombytes(fps.astype(np.uint64, copy=False).tobytes())
        if self.names is not None:
            self.names.extend(keys)
        self.live_bytes += nbytes

    def reset_entries(self) -> None:
        """No entry of this generation is indexed any more (lock held); keys not yet told stay."""
        self.fps = array("Q")
        self.names = []
        self.live_bytes = 0

    @property
    def pinned(self) -> bool:
        return self.readers > 0 or self.writers > 0

    def __repr__(self) -> str:
        return f"Region({self.rid}, {self.state.value}, gen={self.gen}, off={self.write_off})"


def open_region_fd(path: str, direct: bool, create: bool) -> int:
    """Open a region file (``create``: make it, 0600); never follows a link (ELOOP)."""
    flags = os.O_RDWR | O_NOFOLLOW | (os.O_CREAT if create else 0) | (O_DIRECT if direct else 0)
    return os.open(path, flags, FILE_MODE)


def preallocate(fd: int, size: int) -> str:
    """Reserve ``size`` bytes for ``fd``: ``posix_fallocate``, else ``ftruncate`` (sparse).

    Returns ``"fallocate"`` or ``"sparse"``; raises OSError(ENOSPC) when the disk is full.
    """
    try:
        os.posix_fallocate(fd, 0, size)
        return "fallocate"
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, getattr(errno, "ENOTSUP", -1)):
            raise
    if os.fstat(fd).st_size < size:
        os.ftruncate(fd, size)
    return "sparse"


def write_region_header(fd: int, header: RegionHeader) -> None:
    buf = memoryview(aligned_buffer(BLOCK))
    header.pack_into(buf)
    pwritev_full(fd, [buf], 0)


def remove_region_file(region: Region) -> None:
    """Close and unlink the region's file (gives its space back to the filesystem)."""
    if region.fd is not None:
        with contextlib.suppress(OSError):
            os.close(region.fd)
        region.fd = None
    with contextlib.suppress(OSError):
        os.unlink(region.path)
    region.allocated = False
