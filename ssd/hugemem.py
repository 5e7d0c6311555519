"""Which memory is backed by huge pages (:class:`HugeRanges`), so writes can take it in place.

A block device takes an O_DIRECT request from memory on 2 MiB pages as a few long segments; from
ordinary 4 KiB pages it gets one segment per page (up to its ``max_segments``), and a virtual disk
then runs at about half speed. The write path therefore writes a caller's memory in place only
when it lies in a range registered here and found huge-backed (``SsdEngine.register_memory``: the
DRAM tier's arena, a host pool on huge pages); other memory is staged into the engine's own
huge-page buffers first (``SsdOptions.stage_writes``).

The check reads ``/proc/self/smaps`` once per registration (Linux; elsewhere nothing is
huge-backed). Registered ranges are immutable snapshots: :meth:`HugeRanges.covers` takes no lock.
"""

from __future__ import annotations

import bisect
import re
import threading

from .io import address_of

_HUGE_FIELDS = ("AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Shared_Hugetlb", "Private_Hugetlb")
MIN_HUGE_FRACTION = 0.9


_MAPPING = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) ", re.M)
_FIELD = re.compile(rb"^(Size|" + b"|".join(f.encode() for f in _HUGE_FIELDS) + rb"):\s+(\d+) kB", re.M)


def huge_fraction(start: int, nbytes: int, smaps: str = "/proc/self/smaps") -> float:
    """Share of ``[start, start + nbytes)`` on huge pages (per mapping: its huge bytes times the
    share of the mapping the range covers); 0.0 when unknown. The file is scanned with regular
    expressions, and only the mappings that overlap the range are read field by field: a
    process with torch loaded has thousands of mappings (a line-by-line parse took 0.5 s)."""
    if nbytes <= 0:
        return 0.0
    end = start + nbytes
    try:
        with open(smaps, "rb") as f:
            text = f.read()
    except OSError:
        return 0.0
    heads = list(_MAPPING.finditer(text))
    huge = 0.0
    for i, m in enumerate(heads):
        lo, hi = int(m[1], 16), int(m[2], 16)
        if not (lo < end and hi > start):
            continue
        block_end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        size_kb = huge_kb = 0
        for field in _FIELD.finditer(text, m.end(), block_end):
            if field[1] == b"Size":
                size_kb = int(field[2])
            else:
                huge_kb += int(field[2])
        if size_kb > 0:
            huge += huge_kb * 1024 * (min(hi, end) - max(lo, start)) / (size_kb * 1024)
    return min(1.0, huge / nbytes)


class HugeRanges:
    """Address ranges found on huge pages at registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # (starts, ends), replaced whole

    def register(self, view: memoryview) -> float:
        """Check ``view``'s memory; remember it when at least ``MIN_HUGE_FRACTION`` of it is on huge
        pages. Returns the fraction found."""
        start, n = address_of(view), view.nbytes
        frac = huge_fraction(start, n)
        if frac >= MIN_HUGE_FRACTION:
            with self._lock:
                starts, ends = self._spans
                spans = sorted({*zip(starts, ends, strict=True), (start, start + n)})
                self._spans = (tuple(s for s, _ in spans), tuple(e for _, e in spans))
        return frac

    def covers(self, view: memoryview) -> bool:
        starts, ends = self._spans
        if not starts:
            return False
        a = address_of(view)
        i = bisect.bisect_right(starts, a) - 1
        return i >= 0 and a + view.nbytes <= ends[i]

    def clear(self) -> None:
        with self._lock:
            self._spans = ((), ())
