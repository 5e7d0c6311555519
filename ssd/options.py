"""Options of one SSD engine (:class:`SsdOptions`), validated on construction.

Invariants enforced here (a bad value raises ``ValueError`` naming the field):

* ``region_size`` is a multiple of 4096 and at least 64 KiB;
* ``capacity_bytes`` holds at least two regions (one being written, one to reclaim);
* ``dirs`` is non-empty and has no duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass

from .format import BLOCK, ENTRY_FIXED_SIZE

_MIN_REGION = 64 << 10
FILE_THREADS = 4
"""The most Python threads an engine runs for its own file work (``SsdOptions.file_threads``)."""


@dataclass(frozen=True)
class SsdOptions:
    """Configuration of one :class:`~hicache_mooncake.ssd.engine.SsdEngine`.

    ``dirs``: one or more directories; region ``r`` lives in ``dirs[r % len(dirs)]``.
    ``capacity_bytes``: total bytes of region files (rounded down to whole regions).
    ``min_free_bytes``: floor of free space on each directory's filesystem (``statvfs``,
    so foreign usage counts); below it puts fail with reason ``floor`` and old regions of that
    directory are released (their files unlinked).
    ``direct_io``: ``"auto"`` (O_DIRECT if every directory accepts it), ``"on"`` (refuse to open
    otherwise), ``"off"``.
    ``verify_on_recover``: recovery hashes every payload (finds torn/corrupt entries at open);
    when False only headers are checked at open and payloads are verified on each read anyway.
    ``reinsertion_hits``: on region reclaim, entries hit at least this often since they were
    written are rewritten into the active region (0 disables reinsertion).
    ``reinsertion_fraction``: at most this fraction of a region is reinserted per reclaim.
    ``write_chunk_bytes``: a put writes its entries in runs of about this size (split at entry
    boundaries; an entry larger than that is a run of its own), each laid out and written by one
    native I/O worker while the others write theirs.
    ``io_threads``: the native I/O workers this engine needs (the process's pool grows to at
    least this many): each has one read or write in flight, so this is the I/O depth. The
    engine's own file work (region opens and removals, summaries, fsyncs, epoch maps) runs on
    ``file_threads`` Python threads (a few, whatever the depth).
    ``read_run_bytes``: a get reads adjacent entries of a region as one run of about this size
    (an entry larger than that is a run of its own): read by one native I/O worker into its
    staging memory (in requests of at most 1 MiB), checked and copied out by that worker while
    the other runs are being read.
    ``zero_copy_writes``: write payloads straight from the caller's memory (buffered I/O, or
    O_DIRECT when every part is 4096-aligned) instead of copying each batch into an aligned
    buffer first; a put then does not return while a concurrent get still copies from it.
    ``max_capacity_bytes``: the most :meth:`~.engine.SsdEngine.resize` may grow the engine to (0:
    ``capacity_bytes``); region ids up to it exist from the start (their files are made as used).
    ``stage_writes``: with O_DIRECT, copy payloads into the engine's huge-page buffers before
    writing them: ``"auto"`` unless the caller's memory was registered and found on huge pages
    (``SsdEngine.register_memory``; a disk takes 4 KiB-page memory as one segment per page and
    runs at about half speed), ``"always"``, or ``"never"`` (in place whenever aligned).
    ``probe_timeout_s`` / ``probe_interval_s``: after a call ran past its deadline the engine is
    degraded (calls skipped) until a health probe (write + fsync + read of a small file in each
    directory) finishes within ``probe_timeout_s``; one probe every ``probe_interval_s``.
    """

    dirs: tuple[str, ...]
    capacity_bytes: int
    region_size: int = 64 << 20
    min_free_bytes: int = 0
    direct_io: str = "auto"
    strict: bool = False
    io_threads: int = 8
    reinsertion_hits: int = 1
    max_key_bytes: int = 1024
    verify_on_recover: bool = True
    reinsertion_fraction: float = 0.5
    write_chunk_bytes: int = 8 << 20
    read_run_bytes: int = 3 << 20
    zero_copy_writes: bool = True
    stage_writes: str = "auto"
    probe_timeout_s: float = 5.0
    probe_interval_s: float = 1.0
    max_capacity_bytes: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.dirs, str):
            object.__setattr__(self, "dirs", (self.dirs,))
        else:
            object.__setattr__(self, "dirs", tuple(str(d) for d in self.dirs))
        if not self.dirs:
            raise ValueError("SsdOptions.dirs: at least one directory is required")
        if len(set(self.dirs)) != len(self.dirs):
            raise ValueError(f"SsdOptions.dirs: duplicate directory in {self.dirs!r}")
        if self.region_size % BLOCK or self.region_size < _MIN_REGION:
            raise ValueError(
                f"SsdOptions.region_size: {self.region_size} must be a multiple of {BLOCK} and >= {_MIN_REGION}"
            )
        if self.capacity_bytes < 2 * self.region_size:
            raise ValueError(
                f"SsdOptions.capacity_bytes: {self.capacity_bytes} must hold at least 2 regions "
                f"of region_size={self.region_size}"
            )
        if self.min_free_bytes < 0:
            raise ValueError("SsdOptions.min_free_bytes: must be >= 0")
        if self.stage_writes not in ("auto", "always", "never"):
            raise ValueError(
                f"SsdOptions.stage_writes: {self.stage_writes!r} is not one of auto, always, never"
            )
        if self.direct_io not in ("auto", "on", "off"):
            raise ValueError(f"SsdOptions.direct_io: {self.direct_io!r} is not one of auto, on, off")
        if self.io_threads < 1:
            raise ValueError("SsdOptions.io_threads: must be >= 1")
        if self.reinsertion_hits < 0:
            raise ValueError("SsdOptions.reinsertion_hits: must be >= 0")
        if not 1 <= self.max_key_bytes <= BLOCK - ENTRY_FIXED_SIZE:
            raise ValueError(f"SsdOptions.max_key_bytes: must be in 1..{BLOCK - ENTRY_FIXED_SIZE}")
        if not 0.0 <= self.reinsertion_fraction <= 1.0:
            raise ValueError("SsdOptions.reinsertion_fraction: must be in [0, 1]")
        if self.probe_timeout_s <= 0 or self.probe_interval_s <= 0:
            raise ValueError("SsdOptions.probe_timeout_s / probe_interval_s: must be > 0")
        if self.max_capacity_bytes and self.max_capacity_bytes < self.capacity_bytes:
            raise ValueError("SsdOptions.max_capacity_bytes: must be 0 or >= capacity_bytes")
        if min(self.write_chunk_bytes, self.read_run_bytes) < BLOCK:
            raise ValueError("SsdOptions.write_chunk_bytes / read_run_bytes: must be >= 4096")

    @property
    def file_threads(self) -> int:
        """Python threads of the engine's own file work (``IoPool``): ``io_threads``, at most
        ``FILE_THREADS``. That work is a few syscalls now and then (a region opened per 64 MiB
        written, a summary per region sealed), never a payload: more threads add nothing but
        threads that take the GIL."""
        return min(self.io_threads, FILE_THREADS)

    @property
    def num_regions(self) -> int:
        """Region ids that exist (up to ``max_capacity_bytes``); ``capacity_bytes`` says how many
        of them are used at open."""
        return max(self.capacity_bytes, self.max_capacity_bytes) // self.region_size

    @property
    def used_regions(self) -> int:
        return self.capacity_bytes // self.region_size

    @property
    def max_object_bytes(self) -> int:
        """Largest payload one entry can hold (a region minus its header and the entry header)."""
        return self.region_size - 2 * BLOCK
