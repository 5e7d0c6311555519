"""Which memory is backed by huge pages (:class:`HugeRanges`), so writes can take it in place.

A block device takes an O_DIRECT request from memory on 2 MiB pages as a few long segments; from
ordinary 4 KiB pages it gets one segment per page (up to its ``max_segments``), and a virtual disk
then runs at about half speed. The write path therefore writes a caller's memory in place only
when it lies in a range registered here and found huge-backed (``SsdEngine.register_memory``: the
DRAM tier's arena, a host pool on huge pages); other memory is staged into the engine's own
huge-page buffers first (``SsdOptions.stage_writes``).

The check asks the kernel about the registered ranges alone (``PAGEMAP_SCAN``, Linux 6.7 and
later: milliseconds), else reads ``/proc/self/smaps`` once per registration (a walk of every
mapping; elsewhere than Linux nothing is huge-backed); the engine runs it on a thread at attach
(``SsdEngine.register_memory_later``), and until it is done puts from that memory are staged (one
copy more, never wrong). Registered ranges
are immutable snapshots: :meth:`HugeRanges.covers` takes no lock.
"""

from __future__ import annotations

import bisect
import fcntl
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Sequence

import numpy as np

from .io import address_of

_HUGE_FIELDS = ("AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Shared_Hugetlb", "Private_Hugetlb")
MIN_HUGE_FRACTION = 0.9


SMAPS = "/proc/self/smaps"
# PAGEMAP_SCAN (Linux >= 6.7): struct pm_scan_arg is 12 u64s, struct page_region 3 u64s
_PM_SCAN_ARG = struct.Struct("<12Q")
_PAGE_REGION = struct.Struct("<3Q")
_PAGEMAP_SCAN = (3 << 30) | (_PM_SCAN_ARG.size << 16) | (ord("f") << 8) | 16  # _IOWR('f', 16, ...)
_PAGE_IS_HUGE = 1 << 6
_SCAN_REGIONS = 512
_PAGE = mmap.PAGESIZE


def scanned_huge_fractions(ranges: Sequence[tuple[int, int]]) -> list[float] | None:
    """``huge_fractions`` of this process's memory from the kernel's ``PAGEMAP_SCAN`` (Linux 6.7
    and later): it walks the page tables of the ranges asked about and nothing else, a few
    milliseconds per GB at most. None where the kernel has no such call (then ``smaps`` is read).
    A range counts as huge where a PMD-mapped transparent huge page or a hugetlb page backs it
    (what ``AnonHugePages`` and the hugetlb fields of ``smaps`` count)."""
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return None
    try:
        out = []
        vec = bytearray(_PAGE_REGION.size * _SCAN_REGIONS)
        vec_addr = address_of(memoryview(vec))
        for start, nbytes in ranges:
            if nbytes <= 0:
                out.append(0.0)
                continue
            lo = start - start % _PAGE
            end = start + nbytes
            hi = -(-end // _PAGE) * _PAGE
            huge = 0
            while lo < hi:
                # size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted,
                # category_mask (pages must be huge), category_anyof_mask, return_mask
                fields = (_PM_SCAN_ARG.size, 0, lo, hi, 0, vec_addr, _SCAN_REGIONS, 0, 0)
                arg = bytearray(_PM_SCAN_ARG.pack(*fields, _PAGE_IS_HUGE, 0, _PAGE_IS_HUGE))
                found = fcntl.ioctl(fd, _PAGEMAP_SCAN, arg)
                for i in range(found):
                    r_lo, r_hi, _ = _PAGE_REGION.unpack_from(vec, i * _PAGE_REGION.size)
                    huge += max(0, min(r_hi, end) - max(r_lo, start))
                walk_end = _PM_SCAN_ARG.unpack(arg)[4]
                if walk_end <= lo:
                    break
                lo = walk_end
            out.append(min(1.0, huge / nbytes))
        return out
    except OSError:
        return None  # ENOTTY / EINVAL: a kernel without PAGEMAP_SCAN
    finally:
        os.close(fd)


_MAPPING = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) ", re.M)
_FIELD = re.compile(rb"^(Size|" + b"|".join(f.encode() for f in _HUGE_FIELDS) + rb"):\s+(\d+) kB", re.M)


def huge_fraction(start: int, nbytes: int, smaps: str = SMAPS) -> float:
    """Share of ``[start, start + nbytes)`` on huge pages (per mapping: its huge bytes times the
    share of the mapping the range covers); 0.0 when unknown."""
    return huge_fractions([(start, nbytes)], smaps)[0]


def huge_fractions(ranges: Sequence[tuple[int, int]], smaps: str = SMAPS) -> list[float]:
    """``huge_fraction`` of each ``(start, nbytes)``. For this process the kernel is asked about the
    ranges alone where it can (``scanned_huge_fractions``); otherwise, or for another ``smaps``
    file, from one read of it. To write that file the kernel walks every mapping's page tables,
    holding the process's mmap lock while it walks one (so other threads' mmap and munmap wait):
    about 0.5 s for a process with a few GB resident, longer with a large host pool, so callers on
    the attach path run this on a thread (``SsdEngine.register_memory_later``). The text is
    scanned with regular expressions and only the mappings that overlap a range are read field by
    field."""
    if not any(n > 0 for _, n in ranges):
        return [0.0] * len(ranges)
    if smaps == SMAPS:
        scanned = scanned_huge_fractions(ranges)
        if scanned is not None:
            return scanned
    try:
        with open(smaps, "rb") as f:
            text = f.read()
    except OSError:
        return [0.0] * len(ranges)
    heads = list(_MAPPING.finditer(text))
    huge = [0.0] * len(ranges)
    for i, m in enumerate(heads):
        lo, hi = int(m[1], 16), int(m[2], 16)
        overlaps = [k for k, (start, n) in enumerate(ranges) if n > 0 and lo < start + n and hi > start]
        if not overlaps:
            continue
        block_end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        size_kb = huge_kb = 0
        for field in _FIELD.finditer(text, m.end(), block_end):
            if field[1] == b"Size":
                size_kb = int(field[2])
            else:
                huge_kb += int(field[2])
        if size_kb <= 0:
            continue
        for k in overlaps:
            start, n = ranges[k]
            huge[k] += huge_kb * (min(hi, start + n) - max(lo, start)) / size_kb
    return [min(1.0, h / n) if n > 0 else 0.0 for h, (_, n) in zip(huge, ranges, strict=True)]


class HugeRanges:
    """Address ranges found on huge pages at registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # (starts, ends), replaced whole
        self._checks: list[threading.Thread] = []  # register_later

    def register(self, view: memoryview) -> float:
        """Check ``view``'s memory; remember it when at least ``MIN_HUGE_FRACTION`` of it is on huge
        pages. Returns the fraction found."""
        return self.register_many([view])[0]

    def register_many(self, views: Sequence[memoryview]) -> list[float]:
        """``register`` of each view, with one read of ``/proc/self/smaps``."""
        ranges = [(address_of(v), v.nbytes) for v in views]
        fractions = huge_fractions(ranges)
        found = [
            (start, start + n)
            for (start, n), f in zip(ranges, fractions, strict=True)
            if f >= MIN_HUGE_FRACTION
        ]
        if found:
            with self._lock:
                starts, ends = self._spans
                spans = sorted({*zip(starts, ends, strict=True), *found})
                self._spans = (tuple(s for s, _ in spans), tuple(e for _, e in spans))
        return fractions

    def register_later(self, views: Sequence[memoryview]) -> None:
        """``register_many`` on a thread (the views are kept alive by it until it is done)."""
        check = threading.Thread(
            target=self.register_many, args=(views,), name="hicache-ssd-hugepages", daemon=True
        )
        with self._lock:
            self._checks = [t for t in self._checks if t.is_alive()] + [check]
        check.start()

    def checked(self, timeout_s: float | None = None) -> bool:
        """Wait until the ``register_later`` checks are done; False if one still runs."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            checks = list(self._checks)
        for check in checks:
            check.join(None if end is None else max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in checks)

    def covers(self, view: memoryview) -> bool:
        starts, ends = self._spans
        if not starts:
            return False
        a = address_of(view)
        i = bisect.bisect_right(starts, a) - 1
        return i >= 0 and a + view.nbytes <= ends[i]

    def covers_spans(self, spans: np.ndarray) -> bool:
        """Whether every ``(address, length)`` row of ``spans`` (``native.view_spans``) lies in
        one registered range."""
        starts, ends = self._spans
        if not starts:
            return False
        a = spans[:, 0]
        i = np.searchsorted(np.asarray(starts, np.uint64), a, side="right").astype(np.int64) - 1
        if (i < 0).any():
            return False
        return bool((a + spans[:, 1] <= np.asarray(ends, np.uint64)[i]).all())

    def clear(self) -> None:
        with self._lock:
            self._spans = ((), ())
