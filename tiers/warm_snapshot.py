"""The warm-restart snapshot: the placement's view of what is hot, kept beside the SSD tier's data
so that a restart (or an attach of the same directory) starts warm.

File ``hicache-warm.snap`` in the SSD tier's first directory, replaced atomically (written to a
temporary file, fsynced, renamed over the old one, directory fsynced): a crash leaves the old
snapshot or the new one, never a mix. Layout::

    magic "HCMWARM1" | version u16 | header length u32 | header (JSON)
    | entries: flags u8 (1: in DRAM) | size u32 | key length u16 | key (UTF-8)
    | xxh3_64 of everything before it (u64)

The header names what the snapshot belongs to (``MATCH_KEYS``: the SSD engine's epoch, which
``clear`` bumps, and its region size). ``read_snapshot`` refuses a file whose magic, version,
checksum or header does not match, with the reason, and the cache starts cold: a snapshot is used
whole or not at all. Entries are hottest first (DRAM, most recent first, then SSD pages); at most
``max_entries`` of them are written, so the file stays bounded (about 100 bytes per page).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import xxhash

SNAPSHOT_NAME = "hicache-warm.snap"
MAGIC = b"HCMWARM1"
VERSION = 1
MATCH_KEYS = ("epoch", "region_size")
_HEAD = struct.Struct("<8sHI")
_ENTRY = struct.Struct("<BIH")
_SUM = struct.Struct("<Q")
_MAX_KEY = 1024
_YIELD_MASK = 255
"""encode and decode hand the GIL over every 256 entries: they run on background threads beside
SGLang's, and a thread that waits for the GIL would otherwise wait the whole switch interval (5 ms)
each time it gives it up."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    key: str
    size: int
    in_dram: bool


@dataclass
class Snapshot:
    header: dict[str, Any]
    entries: list[SnapshotEntry] = field(default_factory=list)


def snapshot_path(directory: str) -> str:
    return os.path.join(directory, SNAPSHOT_NAME)


def encode(header: dict[str, Any], entries: list[SnapshotEntry]) -> bytes:
    head = json.dumps({**header, "entries": len(entries)}, sort_keys=True).encode()
    out = bytearray(_HEAD.pack(MAGIC, VERSION, len(head)))
    out += head
    for i, e in enumerate(entries):
        if i & _YIELD_MASK == _YIELD_MASK:
            time.sleep(0)  # let SGLang's threads have the GIL (this runs beside them)
        raw = e.key.encode()
        if len(raw) > _MAX_KEY or not 0 <= e.size < 1 << 32:
            continue
        out += _ENTRY.pack(1 if e.in_dram else 0, e.size, len(raw))
        out += raw
    out += _SUM.pack(xxhash.xxh3_64_intdigest(bytes(out)))
    return bytes(out)


def decode(data: bytes) -> Snapshot:
    """The snapshot in ``data``; ``ValueError`` saying what is wrong."""
    if len(data) < _HEAD.size + _SUM.size or data[:8] != MAGIC:
        raise ValueError("not a warm snapshot (bad magic)")
    (want,) = _SUM.unpack_from(data, len(data) - _SUM.size)
    if xxhash.xxh3_64_intdigest(data[: -_SUM.size]) != want:
        raise ValueError("checksum mismatch (torn or corrupt file)")
    _magic, version, head_len = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise ValueError(f"format version {version}, this build reads {VERSION}")
    pos = _HEAD.size + head_len
    header = json.loads(data[_HEAD.size : pos])
    entries: list[SnapshotEntry] = []
    end = len(data) - _SUM.size
    while pos < end:
        if len(entries) & _YIELD_MASK == _YIELD_MASK:
            time.sleep(0)  # let SGLang's threads have the GIL (this runs beside them)
        flags, size, key_len = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        entries.append(SnapshotEntry(data[pos : pos + key_len].decode(), size, bool(flags & 1)))
        pos += key_len
    if pos != end or len(entries) != header.get("entries"):
        raise ValueError("entry count does not match the header")
    return Snapshot(header, entries)


def write_snapshot(directory: str, header: dict[str, Any], entries: list[SnapshotEntry]) -> int:
    """Replace the directory's snapshot atomically (module docstring); returns the bytes written.
    OSError when the directory cannot take it (the old snapshot, if any, stays)."""
    data = encode(header, entries)
    path = snapshot_path(directory)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return len(data)


def read_snapshot(directory: str, expect: dict[str, Any]) -> tuple[Snapshot | None, str]:
    """The directory's snapshot if it matches ``expect`` (``MATCH_KEYS``), else ``(None, why)``."""
    try:
        with open(snapshot_path(directory), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, "no snapshot"
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    try:
        snap = decode(data)
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        return None, str(exc)
    for key in MATCH_KEYS:
        if snap.header.get(key) != expect.get(key):
            return None, f"written for {key} {snap.header.get(key)!r}, the store has {expect.get(key)!r}"
    return snap, "used"
