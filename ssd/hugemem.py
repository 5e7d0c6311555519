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
import threading

from .io import address_of

_HUGE_FIELDS = ("AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Shared_Hugetlb", "Private_Hugetlb")
MIN_HUGE_FRACTION = 0.9


def huge_fraction(start: int, nbytes: int, smaps: str = "/proc/self/smaps") -> float:
    """Share of ``[start, start + nbytes)`` on huge pages (per mapping: its huge bytes times the
    share of the mapping the range covers); 0.0 when unknown."""
    if nbytes <= 0:
        return 0.0
    end = start + nbytes
    huge = 0.0
    lo = hi = 0
    size_kb = huge_kb = 0
    inside = False

    def close() -> float:
        if not inside or size_kb <= 0:
            return 0.0
        overlap = min(hi, end) - max(lo, start)
        return huge_kb * 1024 * overlap / (size_kb * 1024)

    try:
        with open(smaps, encoding="ascii", errors="replace") as f:
            for line in f:
                head = line.split(None, 1)[0] if line.strip() else ""
                if "-" in head and not head.endswith(":"):
                    huge += close()
                    a, _, b = head.partition("-")
                    try:
                        lo, hi = int(a, 16), int(b, 16)
                    except ValueError:
                        inside = False
                        continue
                    inside = lo < end and hi > start
                    size_kb = huge_kb = 0
                elif inside:
                    name = head.rstrip(":")
                    if name == "Size":
                        size_kb = int(line.split()[1])
                    elif name in _HUGE_FIELDS:
                        huge_kb += int(line.split()[1])
            huge += close()
    except (OSError, ValueError, IndexError):
        return 0.0
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
