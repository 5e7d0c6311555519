"""On-disk format: region header, entry header, superblock (serialise / parse, no I/O).

Region file (``region-NNNNNN.bin``, ``region_size`` bytes, preallocated)::

    [0, 4096)        region header block
    [4096, ...)      entries, each starting on a 4096 boundary:
                     [entry header block: fixed header + key, zero padded to 4096]
                     [payload, zero padded to a multiple of 4096]

Region header (little endian): magic ``HCMREGN1``, format version, region id, epoch, generation
(``gen``: the global sequence number taken when the region was (re)opened for writing),
region size, xxh3_64 of the preceding bytes.

Entry header: magic, format version, flags, key length, payload length, sequence number,
generation of the region it was written into, xxh3_64 of the payload, xxh3_64 over the fixed
header (without that last field) and the key bytes. The header hash covers the payload hash, so
the pair covers header and payload.

Validity (checked by recovery, fsck and every read): an entry is live only if its header hash
matches, its ``gen`` equals the region header's ``gen`` (older generations left behind after a
region is reused are stale, never served) and its payload hash matches. A region is live only if
its header hash matches and its ``epoch`` equals the superblock's (``clear()`` bumps it).

Superblock (``hicache-ssd.meta`` in every directory, JSON, replaced atomically): format, epoch,
boot counter and region size. Sequence numbers are ``boot << 40 | counter`` so they stay unique
and increasing across restarts without a write per put.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import struct
from dataclasses import dataclass

import xxhash

BLOCK = 4096
FORMAT_VERSION = 1

REGION_MAGIC = b"HCMREGN1"
_REGION_FMT = struct.Struct("<8sHHIIIQQQQ")  # magic ver flags rid pad pad epoch gen region_size created
_REGION_HASHED = _REGION_FMT.size
REGION_HEADER_SIZE = _REGION_HASHED + 8

ENTRY_MAGIC = 0x454B4348  # b"HCKE" little endian
ENTRY_MAGIC_BYTES = struct.pack("<I", ENTRY_MAGIC)
_ENTRY_FMT = struct.Struct("<IHHIIQQQQ")  # magic ver flags key_len pad payload_len seq gen payload_hash
ENTRY_FIXED_SIZE = _ENTRY_FMT.size + 8
FLAG_DEAD = 1  # written by fsck --repair: the entry is skipped, its length still walks the log

SEQ_BOOT_SHIFT = 40

SUPERBLOCK_NAME = "hicache-ssd.meta"
LOCK_NAME = "hicache-ssd.lock"
REGION_PREFIX = "region-"
REGION_SUFFIX = ".bin"


def align_up(n: int, a: int = BLOCK) -> int:
    return (n + a - 1) // a * a


def entry_size(payload_len: int) -> int:
    """Bytes an entry occupies in a region (header block + padded payload)."""
    return BLOCK + align_up(payload_len)


def region_file_name(rid: int) -> str:
    return f"{REGION_PREFIX}{rid:06d}{REGION_SUFFIX}"


def parse_region_file_name(name: str) -> int | None:
    if not (name.startswith(REGION_PREFIX) and name.endswith(REGION_SUFFIX)):
        return None
    core = name[len(REGION_PREFIX) : -len(REGION_SUFFIX)]
    return int(core) if core.isdigit() else None


def region_files_in(directory: str) -> set[int]:
    """Region ids whose files are in ``directory`` (one ``listdir``, no ``stat`` per region)."""
    out: set[int] = set()
    for name in os.listdir(directory):
        rid = parse_region_file_name(name)
        if rid is not None:
            out.add(rid)
    return out


@dataclass(frozen=True)
class RegionHeader:
    region_id: int
    epoch: int
    gen: int
    region_size: int
    created_ns: int = 0
    flags: int = 0

    def pack_into(self, buf: memoryview) -> None:
        """Write the header (and zero the rest of the block) into ``buf[:BLOCK]``."""
        buf[:BLOCK] = bytes(BLOCK)
        _REGION_FMT.pack_into(
            buf, 0, REGION_MAGIC, FORMAT_VERSION, self.flags, self.region_id, 0, 0,
            self.epoch, self.gen, self.region_size, self.created_ns,
        )  # fmt: skip
        h = xxhash.xxh3_64_intdigest(buf[:_REGION_HASHED])
        struct.pack_into("<Q", buf, _REGION_HASHED, h)


def parse_region_header(buf: bytes | memoryview) -> tuple[RegionHeader | None, str]:
    """Return ``(header, "")`` or ``(None, reason)``; never raises."""
    if len(buf) < REGION_HEADER_SIZE:
        return None, "region header truncated"
    mv = memoryview(buf)
    magic, ver, flags, rid, _p1, _p2, epoch, gen, rsize, created = _REGION_FMT.unpack_from(mv, 0)
    if magic != REGION_MAGIC:
        return None, "bad region magic" if any(mv[:REGION_HEADER_SIZE]) else "region never written"
    (h,) = struct.unpack_from("<Q", mv, _REGION_HASHED)
    if h != xxhash.xxh3_64_intdigest(mv[:_REGION_HASHED]):
        return None, "region header checksum mismatch"
    if ver != FORMAT_VERSION:
        return None, f"unsupported region format version {ver}"
    return RegionHeader(rid, epoch, gen, rsize, created, flags), ""


@dataclass(frozen=True)
class EntryHeader:
    key: bytes
    payload_len: int
    seq: int
    gen: int
    payload_hash: int
    flags: int = 0

    @property
    def size(self) -> int:
        return entry_size(self.payload_len)

    def pack_into(self, buf: memoryview) -> None:
        """Write the header block into ``buf[:BLOCK]`` (the caller zeroes the padding once)."""
        kl = len(self.key)
        _ENTRY_FMT.pack_into(
            buf, 0, ENTRY_MAGIC, FORMAT_VERSION, self.flags, kl, 0,
            self.payload_len, self.seq, self.gen, self.payload_hash,
        )  # fmt: skip
        end = _ENTRY_FMT.size
        buf[end + 8 : end + 8 + kl] = self.key
        h = xxhash.xxh3_64()
        h.update(buf[:end])
        h.update(self.key)
        struct.pack_into("<Q", buf, end, h.intdigest())


def parse_entry_header(
    buf: bytes | memoryview, max_key: int = BLOCK - ENTRY_FIXED_SIZE
) -> tuple[EntryHeader | None, str]:
    """Parse an entry header block. Returns ``(header, "")`` or ``(None, reason)``.

    ``reason`` is ``"no entry"`` when the block does not start with the entry magic (end of log,
    never-written space, or the middle of a payload) and a corruption description otherwise.
    """
    mv = memoryview(buf)
    if len(mv) < ENTRY_FIXED_SIZE or mv[:4] != ENTRY_MAGIC_BYTES:
        return None, "no entry"
    _m, ver, flags, kl, _pad, plen, seq, gen, phash = _ENTRY_FMT.unpack_from(mv, 0)
    end = _ENTRY_FMT.size
    if kl > max_key or end + 8 + kl > len(mv) or end + 8 + kl > BLOCK:
        return None, f"entry header key length {kl} out of range"
    (h,) = struct.unpack_from("<Q", mv, end)
    hasher = xxhash.xxh3_64()
    hasher.update(mv[:end])
    key = bytes(mv[end + 8 : end + 8 + kl])
    hasher.update(key)
    if hasher.intdigest() != h:
        return None, "entry header checksum mismatch"
    if ver != FORMAT_VERSION:
        return None, f"unsupported entry format version {ver}"
    return EntryHeader(key, plen, seq, gen, phash, flags), ""


@dataclass
class Superblock:
    epoch: int = 0
    boot: int = 0
    region_size: int = 0
    format: int = FORMAT_VERSION

    @staticmethod
    def read(directory: str) -> Superblock | None:
        """Read ``directory``'s superblock; None if absent or unreadable (treated as a new store)."""
        try:
            with open(os.path.join(directory, SUPERBLOCK_NAME), encoding="utf-8") as f:
                d = json.load(f)
            return Superblock(int(d["epoch"]), int(d["boot"]), int(d["region_size"]), int(d["format"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, directory: str) -> None:
        """Atomically replace the superblock (write tmp, fsync, rename, fsync dir)."""
        path = os.path.join(directory, SUPERBLOCK_NAME)
        tmp = f"{path}.tmp.{os.getpid()}"
        data = json.dumps(
            {"magic": "hicache-mooncake-ssd", "format": self.format, "epoch": self.epoch,
             "boot": self.boot, "region_size": self.region_size}
        ).encode()  # fmt: skip
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short superblock write")
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, path)
        except OSError:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
