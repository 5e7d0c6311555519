"""Which memory is backed by huge pages (:class:`HugeRanges`), so writes can take it in place.

A block device takes an O_DIRECT request from memory on 2 MiB pages as a few long segments; from
ordinary 4 KiB pages it gets one segment per page (up to its ``max_segments``), and a virtual disk
then runs at about half speed. The write path therefore writes a caller's memory in place only
when it lies in a range registered here and found huge-backed (``SsdEngine.register_memory``: the
DRAM tier's arena, a host pool on huge pages); other memory is staged into the engine's own
huge-page buffers first (``SsdOptions.stage_writes``).

The check reads ``/proc/self/smaps`` once per registration (Linux; elsewhere nothing is
huge-backed); the engine runs it on a thread at attach (``SsdEngine.register_memory_later``), and
until it is done puts from that memory are staged (one copy more, never wrong). Registered ranges
are immutable snapshots: :meth:`HugeRanges.covers` takes no lock.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections.abc import Sequence

from .io import address_of

_HUGE_FIELDS = ("AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Shared_Hugetlb", "Private_Hugetlb")
MIN_HUGE_FRACTION = 0.9


_MAPPING = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) ", re.M)
_FIELD = re.compile(rb"^(Size|" + b"|".join(f.encode() for f in _HUGE_FIELDS) + rb"):\s+(\d+) kB", re.M)


def huge_fraction(start: int, nbytes: int, smaps: str = "/proc/self/smaps") -> float:
    """Share of ``[start, start + nbytes)`` on huge pages (per mapping: its huge bytes times the
    share of the mapping the range covers); 0.0 when unknown."""
    return huge_fractions([(start, nbytes)], smaps)[0]


def huge_fractions(ranges: Sequence[tuple[int, int]], smaps: str = "/proc/self/smaps") -> list[float]:
    """``huge_fraction`` of each ``(start, nbytes)``, from one read of ``smaps``. The kernel walks
    every mapping's page tables to write that file: about 0.5 s for a process with a few GB
    resident, longer with a large host pool, so callers on the attach path run this on a thread
    (``SsdEngine.register_memory_later``). The text is scanned with regular expressions and only
    the mappings that overlap a range are read field by field."""
    if not any(n > 0 for _, n in ranges):
        return [0.0] * len(ranges)
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

    def clear(self) -> None:
        with self._lock:
            self._spans = ((), ())
