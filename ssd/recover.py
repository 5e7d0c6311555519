"""Scanning region files: rebuild the index at open (recovery) and verify them (fsck).

``scan_region`` walks one region's log from offset 4096:

* a block that does not start with the entry magic is skipped 4096 bytes at a time (found with a
  vectorised search over 128 KiB chunks), so a hole left by a torn or failed write in the middle
  of a region does not hide the entries after it;
* a header with the magic but a bad checksum or impossible length is a *problem*;
* a valid header of another generation is *stale* (left by an earlier life of the region) and
  silently ignored when it lies past this life's last live entry; before it (inside this life's
  entries, which lie back to back) or when written after the region was opened (a sequence
  above its generation) it is a *misdirected* problem: it replaced an entry of this life;
* a valid header whose payload runs past the end of the file, or (when payloads are verified)
  whose payload hash mismatches, is a *problem*; its length is trusted (the header hash is
  good) to continue after it.

A problem is classified ``torn`` when no live entry follows it in the region (the tail of the
log, what a crash or a short write leaves) and ``corrupt`` otherwise. Both are skipped (never
indexed); ``strict`` recovery raises :class:`SsdCorruptionError` on the first of either.
Across regions the entry with the highest sequence number wins a key.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import checksum
from .errors import SsdCorruptionError
from .format import (
    BLOCK,
    ENTRY_MAGIC,
    ENTRY_MAGIC_BYTES,
    FLAG_DEAD,
    EntryHeader,
    RegionHeader,
    parse_entry_header,
    parse_region_header,
)
from .io import O_DIRECT, aligned_buffer, preadv_full

_CHUNK = 4 << 20
"""Bytes a scan reads per call. Each read gives up the GIL, and getting it back costs up to a
switch interval (5 ms) while another thread runs Python (SGLang's are, while a background scan
runs): 16 reads per 64 MiB region instead of 512. Measured, three regions of 4 KiB entries under
a thread running Python: 9.3 s with 128 KiB reads, 0.9 s with 4 MiB (0.4-0.8 s without it)."""
_VERIFY_CHUNK = 8 << 20


@dataclass
class EntryRecord:
    key: str
    offset: int
    payload_len: int
    seq: int
    flags: int = 0


@dataclass
class Problem:
    offset: int
    reason: str
    length: int  # bytes the bad entry spans when its header was readable, else 0
    kind: str = "torn"  # "torn" | "corrupt" (set after the scan)
    misdirected: bool = False  # a valid header written for another region: always corrupt


@dataclass
class RegionScan:
    rid: int
    path: str
    status: str  # live | empty | stale_epoch | bad_header | foreign_size | unreadable
    header: RegionHeader | None = None
    header_reason: str = ""
    file_size: int = 0
    entries: list[EntryRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    stale: int = 0
    dead: int = 0
    end_offset: int = BLOCK

    @property
    def corrupt(self) -> int:
        return sum(1 for p in self.problems if p.kind == "corrupt") + (
            1 if self.status == "bad_header" else 0
        )

    @property
    def torn(self) -> int:
        return sum(1 for p in self.problems if p.kind == "torn")

    @property
    def live_bytes(self) -> int:
        return sum(e.payload_len for e in self.entries if not e.flags & FLAG_DEAD)


class _Reader:
    """Sequential block reader over one file with a small aligned read-ahead cache."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._buf = aligned_buffer(_CHUNK)
        self._view = memoryview(self._buf)
        self._start = -1
        self._len = 0

    def chunk_at(self, pos: int) -> memoryview:
        """Bytes from ``pos`` (block aligned) to the end of the cached chunk (at least one block if the file has it)."""
        if not (self._start <= pos and pos + BLOCK <= self._start + self._len):
            want = min(_CHUNK, self.size - pos)
            want -= want % BLOCK
            n = preadv_full(self.fd, [self._view[:want]], pos) if want > 0 else 0
            self._start, self._len = pos, n - n % BLOCK
        return self._view[pos - self._start : self._len]

    def close(self) -> None:
        # The mmap is freed by the garbage collector: views of it may still be referenced.
        self._start, self._len = -1, 0


def _find_magic(reader: _Reader, pos: int, end: int) -> int | None:
    """The first block at or after ``pos`` that starts with the entry magic.

    The block at ``pos`` is checked first with a slice compare: entries lie back to back, so that
    is nearly every call. The numpy search of a whole chunk (gaps, the unwritten end) releases the
    GIL for each array operation, and a thread that gives the GIL up waits a whole switch
    interval (5 ms) to get it back while another thread runs Python: called once per entry, it
    made a background scan 100x slower while SGLang's threads were busy."""
    while pos + BLOCK <= end:
        chunk = reader.chunk_at(pos)
        if chunk.nbytes < BLOCK:
            return None
        if chunk[:4] == ENTRY_MAGIC_BYTES:
            return pos
        words = np.frombuffer(chunk, dtype=np.uint32)[:: BLOCK // 4]
        hits = np.flatnonzero(words == ENTRY_MAGIC)
        if hits.size:
            return pos + int(hits[0]) * BLOCK
        pos += chunk.nbytes - chunk.nbytes % BLOCK
    return None


def _hash_payload(reader: _Reader, fd: int, off: int, length: int, scratch: memoryview) -> tuple[int, int]:
    """Hash ``length`` bytes at ``off``; returns (hash, bytes actually read)."""
    h = checksum.new_hasher()
    done = 0
    while done < length:
        n = min(scratch.nbytes, length - done)
        want = n + (-n) % BLOCK
        got = preadv_full(fd, [scratch[:want]], off + done)
        take = min(got, n)
        checksum.update(h, scratch[:take])
        done += take
        if got < want:
            break
    return h.intdigest(), done


def scan_region(
    path: str,
    rid: int,
    region_size: int,
    epoch: int | None,
    verify_payload: bool = True,
    direct: bool = False,
    max_key: int = BLOCK,
) -> RegionScan:
    """Scan one region file (read only). ``epoch=None`` accepts any epoch (fsck)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | (O_DIRECT if direct else 0))
    except OSError as e:
        return RegionScan(rid, path, "unreadable", header_reason=str(e))
    reader = _Reader(fd, 0)
    scratch_mem = None
    try:
        size = os.fstat(fd).st_size
        reader.size = size
        scan = RegionScan(rid, path, "empty", file_size=size)
        if size < BLOCK:
            scan.header_reason = "region file shorter than its header"
            return scan
        head = reader.chunk_at(0)
        header, reason = parse_region_header(head[:BLOCK])
        scan.header, scan.header_reason = header, reason
        if header is None:
            scan.status = "empty" if reason == "region never written" else "bad_header"
            return scan
        if header.region_size != region_size or header.region_id != rid:
            scan.status = "foreign_size"
            scan.header_reason = f"region header says id {header.region_id} size {header.region_size}"
            return scan
        if epoch is not None and header.epoch != epoch:
            scan.status = "stale_epoch"
            return scan
        scan.status = "live"
        end = min(size, region_size)
        stale_at: list[int] = []
        pos = BLOCK
        while True:
            cand = _find_magic(reader, pos, end)
            if cand is None:
                break
            hdr, why = parse_entry_header(reader.chunk_at(cand)[:BLOCK], max_key)
            if hdr is None:
                scan.problems.append(Problem(cand, why, 0))
                pos = cand + BLOCK
                continue
            if hdr.gen != header.gen:
                if hdr.seq > header.gen:
                    # Written after this region was opened, yet for another region (or life): a
                    # misdirected write, which may have overwritten an entry of this region.
                    scan.problems.append(
                        Problem(cand, f"misdirected entry (generation {hdr.gen}, region is {header.gen})", 0,
                                misdirected=True)
                    )  # fmt: skip
                else:
                    stale_at.append(cand)  # left by an earlier life of the region (unless below)
                pos = cand + BLOCK
                continue
            esize = hdr.size
            if hdr.flags & FLAG_DEAD:
                scan.dead += 1
                pos = cand + esize
                continue
            if cand + BLOCK + hdr.payload_len > end:
                scan.problems.append(Problem(cand, "entry runs past end of region file (truncated)", esize))
                pos = cand + BLOCK
                continue
            if verify_payload:
                if scratch_mem is None:
                    scratch_mem = aligned_buffer(_VERIFY_CHUNK)
                got_hash = _hash_entry(reader, fd, cand, hdr, memoryview(scratch_mem))
                if got_hash != hdr.payload_hash:
                    scan.problems.append(Problem(cand, "payload checksum mismatch", esize))
                    pos = cand + esize
                    continue
            scan.entries.append(
                EntryRecord(hdr.key.decode("utf-8", "surrogateescape"), cand, hdr.payload_len, hdr.seq)
            )
            pos = cand + esize
            scan.end_offset = pos
        last_live = scan.entries[-1].offset if scan.entries else -1
        # This life's entries lie back to back from the region's start: a header of an older
        # generation before its last live entry is no leftover; it replaced an entry of this life
        # (a misdirected write over it, or a write lost in a crash): a loss, never "clean".
        for off in stale_at:
            if off < last_live:
                why = "misdirected entry (an older generation's header inside this life's entries)"
                scan.problems.append(Problem(off, why, 0, misdirected=True))
            else:
                scan.stale += 1
        scan.problems.sort(key=lambda p: p.offset)
        for p in scan.problems:
            p.kind = "corrupt" if p.misdirected or p.offset < last_live else "torn"
        return scan
    finally:
        reader.close()
        with contextlib.suppress(OSError):
            os.close(fd)


def _hash_entry(reader: _Reader, fd: int, off: int, hdr: EntryHeader, scratch: memoryview) -> int:
    start = off + BLOCK
    chunk = reader.chunk_at(off)
    if hdr.payload_len + BLOCK <= chunk.nbytes:
        return checksum.payload_hash([chunk[BLOCK : BLOCK + hdr.payload_len]])
    h, _ = _hash_payload(reader, fd, start, hdr.payload_len, scratch)
    return h


@dataclass
class Recovered:
    scans: list[RegionScan]
    winners: dict[str, tuple[int, EntryRecord]]  # key -> (region id, record)
    max_seq: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "recovered_entries": len(self.winners),
            "recover_corrupt": sum(s.corrupt for s in self.scans),
            "recover_torn": sum(s.torn for s in self.scans),
            "recover_stale_entries": sum(s.stale for s in self.scans),
            "recover_duplicates": sum(len(s.entries) for s in self.scans) - len(self.winners),
            "recover_stale_epoch_regions": sum(1 for s in self.scans if s.status == "stale_epoch"),
            "recover_bad_region_headers": sum(1 for s in self.scans if s.status == "bad_header"),
        }


def region_loss(scan: RegionScan, region_size: int, mapped: bool) -> str:
    """Why a whole region file's entries are lost to recovery ("" when they are not): the same
    verdict for the engine (counted, logged) and fsck (reported). ``mapped``: the engine made
    this file (region map), so a short file was cut by someone else."""
    if scan.status == "foreign_size":
        return f"file holds another region ({scan.header_reason}): swapped or renamed?"
    if scan.status == "unreadable":
        return f"unreadable: {scan.header_reason}"
    if mapped and scan.file_size < region_size:
        return f"truncated to {scan.file_size} of {region_size} bytes"
    return ""


def first_problem(scan: RegionScan) -> tuple[int, str] | None:
    if scan.status == "bad_header":
        return 0, scan.header_reason
    if scan.problems:
        p = scan.problems[0]
        return p.offset, f"{p.kind} entry: {p.reason}"
    return None


def recover(
    paths: Iterable[tuple[int, str]],
    region_size: int,
    epoch: int,
    verify_payload: bool,
    direct: bool,
    strict: bool,
    max_key: int,
    progress: Any = None,
) -> Recovered:
    """Scan every ``(region id, path)`` and pick each key's winning entry (highest seq)."""
    scans: list[RegionScan] = []
    winners: dict[str, tuple[int, EntryRecord]] = {}
    max_seq = 0
    it: Iterator[tuple[int, str]] = iter(paths)
    for rid, path in it:
        scan = scan_region(path, rid, region_size, epoch, verify_payload, direct, max_key)
        if progress is not None:
            progress.update(1)
        if strict:
            bad = first_problem(scan)
            if bad is not None:
                raise SsdCorruptionError(path, bad[0], bad[1])
        scans.append(scan)
        if scan.header is not None:
            max_seq = max(max_seq, scan.header.gen)
        for e in scan.entries:
            max_seq = max(max_seq, e.seq)
            cur = winners.get(e.key)
            if cur is None or cur[1].seq < e.seq:
                winners[e.key] = (rid, e)
    return Recovered(scans, winners, max_seq)
