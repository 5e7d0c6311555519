"""The warm-restart snapshot: the placement's view of what is hot, kept beside the SSD tier's data
so that a restart (or an attach of the same directory) starts warm.

File ``hicache-warm.snap`` in the SSD tier's first directory, replaced atomically (written to a
temporary file, fsynced, renamed over the old one, directory fsynced): a crash leaves the old
snapshot or the new one, never a mix. Layout (version 2, little endian)::

    magic "HCMWARM1" | version u16 | header length u32 | header (JSON)
    | flags u8[n] (1: in DRAM) | sizes u32[n] | keys: UTF-8 (surrogatepass), each followed by NUL
    | xxh3_64 of everything before it (u64)

Columns, so that encoding and decoding are a few C-level calls per ~2000 entries (~0.1 us per
entry) rather than Python per entry (~1.5 us: a 256k-entry snapshot then took seconds beside
SGLang's threads and missed the ``io.timeout_s`` of a close). Version 1 files (one record per
entry: flags u8 | size u32 | key length u16 | key) are still read.

The header names what the snapshot belongs to (``MATCH_KEYS``: the SSD engine's epoch, which
``clear`` bumps, and its region size). ``read_snapshot`` refuses a file whose magic, version,
checksum or header does not match, with the reason, and the cache starts cold: a snapshot is used
whole or not at all. Entries are hottest first (DRAM, most recent first, then SSD pages); at most
``max_entries`` of them are written, so the file stays bounded (about 70 bytes per page). A page
whose key holds a NUL or is longer than ``_MAX_KEY`` characters, or whose size does not fit u32,
is left out (a snapshot is a hint: that page starts cold).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xxhash

SNAPSHOT_NAME = "hicache-warm.snap"
MAGIC = b"HCMWARM1"
VERSION = 2
MATCH_KEYS = ("epoch", "region_size")
_HEAD = struct.Struct("<8sHI")
_ENTRY_V1 = struct.Struct("<BIH")
_SUM = struct.Struct("<Q")
_MAX_KEY = 1024
_ERRORS = "surrogatepass"
_ENCODE_CHUNK = 2048
_DECODE_PIECE = 256 << 10  # bytes of keys decoded per call (> 60 keys of the longest kind)
"""encode and decode hand the GIL over between chunks (~1 ms of work each): they run on
background threads beside SGLang's, and a thread that waits for the GIL would otherwise wait the
whole switch interval (5 ms) each time it gives it up."""

Page = tuple[str, int, bool]
"""(key, size, in DRAM)"""


@dataclass
class Snapshot:
    header: dict[str, Any]
    keys: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    in_dram: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


def snapshot_path(directory: str) -> str:
    return os.path.join(directory, SNAPSHOT_NAME)


def _columns(pages: Sequence[Page]) -> tuple[tuple[Any, ...], ...]:
    """``pages`` as (keys, sizes, flags) columns, without the pages the format cannot hold (a NUL
    in the key, a key over ``_MAX_KEY`` characters, a size outside u32): checked with C-level
    passes, filtered per page only when one of them is there."""
    keys, sizes, flags = zip(*pages, strict=True)
    if (
        "\0".join(keys).count("\0") != len(keys) - 1
        or max(map(len, keys)) > _MAX_KEY
        or min(sizes) < 0
        or max(sizes) >= 1 << 32
    ):
        kept = [p for p in pages if "\0" not in p[0] and len(p[0]) <= _MAX_KEY and 0 <= p[1] < 1 << 32]
        return tuple(zip(*kept, strict=True)) if kept else ((), (), ())
    return keys, sizes, flags


def encode(header: dict[str, Any], pages: Sequence[Page]) -> bytes:
    flag_cols: list[bytes] = []
    size_cols: list[bytes] = []
    key_cols: list[bytes] = []
    n = 0
    for start in range(0, len(pages), _ENCODE_CHUNK):
        if start:
            time.sleep(0)  # let SGLang's threads have the GIL (this runs beside them)
        keys, sizes, flags = _columns(pages[start : start + _ENCODE_CHUNK])
        if not keys:
            continue
        flag_cols.append(np.array(flags, dtype=np.uint8).tobytes())
        size_cols.append(np.array(sizes, dtype="<u4").tobytes())
        key_cols.append(("\0".join(keys) + "\0").encode("utf-8", _ERRORS))
        n += len(keys)
    head = json.dumps({**header, "entries": n}, sort_keys=True).encode()
    body = b"".join([_HEAD.pack(MAGIC, VERSION, len(head)), head, *flag_cols, *size_cols, *key_cols])
    return body + _SUM.pack(xxhash.xxh3_64_intdigest(body))


def decode(data: bytes) -> Snapshot:
    """The snapshot in ``data``; ``ValueError`` saying what is wrong."""
    if len(data) < _HEAD.size + _SUM.size or data[:8] != MAGIC:
        raise ValueError("not a warm snapshot (bad magic)")
    (want,) = _SUM.unpack_from(data, len(data) - _SUM.size)
    if xxhash.xxh3_64_intdigest(memoryview(data)[: -_SUM.size]) != want:
        raise ValueError("checksum mismatch (torn or corrupt file)")
    _magic, version, head_len = _HEAD.unpack_from(data, 0)
    if version not in (1, VERSION):
        raise ValueError(f"format version {version}, this build reads 1 and {VERSION}")
    pos = _HEAD.size + head_len
    header = json.loads(data[_HEAD.size : pos])
    n = header.get("entries")
    if not isinstance(n, int) or n < 0:
        raise ValueError("the header has no entry count")
    end = len(data) - _SUM.size
    snap = _decode_v1(header, data, pos, end) if version == 1 else _decode_v2(header, data, pos, end, n)
    if len(snap.keys) != n:
        raise ValueError("entry count does not match the header")
    return snap


def _decode_v2(header: dict[str, Any], data: bytes, pos: int, end: int, n: int) -> Snapshot:
    if end - pos < 5 * n:
        raise ValueError("entry count does not match the header")
    flags = np.frombuffer(data, np.uint8, n, pos)
    sizes = np.frombuffer(data, "<u4", n, pos + n)
    pos += 5 * n
    if pos < end and data[end - 1] != 0:
        raise ValueError("the keys do not end with a NUL")
    keys: list[str] = []
    while pos < end:
        if keys:
            time.sleep(0)  # let SGLang's threads have the GIL (this runs beside them)
        cut = data.rfind(b"\0", pos, min(end, pos + _DECODE_PIECE))
        if cut < 0:
            raise ValueError("a key is longer than the format allows")
        keys += data[pos:cut].decode("utf-8", _ERRORS).split("\0")
        pos = cut + 1
    return Snapshot(header, keys, sizes.tolist(), (flags & 1).astype(bool).tolist())


def _decode_v1(header: dict[str, Any], data: bytes, pos: int, end: int) -> Snapshot:
    """A version 1 file (written by the previous release): one record per entry."""
    snap = Snapshot(header)
    while pos < end:
        if len(snap.keys) & 255 == 255:
            time.sleep(0)
        flags, size, key_len = _ENTRY_V1.unpack_from(data, pos)
        pos += _ENTRY_V1.size
        snap.keys.append(data[pos : pos + key_len].decode())
        snap.sizes.append(size)
        snap.in_dram.append(bool(flags & 1))
        pos += key_len
    if pos != end:
        raise ValueError("entry count does not match the header")
    return snap


def write_snapshot(directory: str, header: dict[str, Any], pages: Sequence[Page]) -> int:
    """Replace the directory's snapshot atomically (module docstring); returns the bytes written.
    OSError when the directory cannot take it (the old snapshot, if any, stays)."""
    data = encode(header, pages)
    path = snapshot_path(directory)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
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
