"""Region summaries (``region-NNNNNN.sum``): a sealed region's index in a few KB, so that a
reopen reads summaries instead of the regions' data.

Written (tmp + rename, no fsync: a lost or torn summary only means a scan) when a region is
sealed and its last write has finished, and at a clean close for the region being written; only
entries still indexed there are listed (a removed key does not come back). Layout, little
endian::

    magic "HCMSUMM1" | version u16 | pad u16 | region id u32 | gen u64 | epoch u64
    | count u32 | flags u32 | end offset u64 | offsets u64[count] | lengths u64[count]
    | seqs u64[count] | keys | xxh3_64 of everything before it

``keys`` is the keys joined by NUL (flag 1: decoded and split in one call) or, when a key holds a
NUL byte, key lengths u16[count] followed by the keys back to back.

A summary is used only when its region id, generation and epoch equal those of the region
header it sits beside and of the current epoch; otherwise (or when it is missing, torn, or the
region was open at a crash) the region is scanned. Payloads listed by a summary are verified when
read, like every read.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass

import numpy as np
import xxhash

from .format import BLOCK, REGION_SUFFIX, RegionHeader, parse_region_header

MAGIC = b"HCMSUMM1"
VERSION = 1
SUFFIX = ".sum"
_HDR = struct.Struct("<8sHHIQQIIQ")  # magic ver pad rid gen epoch count flags end
_NUL_KEYS = 1


def summary_path(region_path: str) -> str:
    return (
        region_path[: -len(REGION_SUFFIX)] + SUFFIX
        if region_path.endswith(REGION_SUFFIX)
        else region_path + SUFFIX
    )


@dataclass
class RegionSummary:
    header: RegionHeader
    file_size: int
    end_offset: int
    keys: list[str]
    offsets: np.ndarray  # uint64, one per key (views of the file's bytes)
    lengths: np.ndarray
    seqs: np.ndarray


def write_summary(
    region_path: str,
    rid: int,
    gen: int,
    epoch: int,
    end_offset: int,
    entries: list[tuple[str, int, int, int]],
) -> None:
    """Write the summary of a region: ``entries`` are ``(key, offset, payload length, seq)``.
    Raises OSError (a full disk: the region will simply be scanned)."""
    kb = [k.encode("utf-8", "surrogateescape") for k, _, _, _ in entries]
    n = len(entries)
    nul = all(b"\0" not in k for k in kb)
    keys = [b"\0".join(kb)] if nul else [np.fromiter((len(k) for k in kb), np.uint16, n).tobytes(), *kb]
    body = b"".join(
        [
            _HDR.pack(MAGIC, VERSION, 0, rid, gen, epoch, n, _NUL_KEYS if nul else 0, end_offset),
            np.fromiter((e[1] for e in entries), np.uint64, n).tobytes(),
            np.fromiter((e[2] for e in entries), np.uint64, n).tobytes(),
            np.fromiter((e[3] for e in entries), np.uint64, n).tobytes(),
            *keys,
        ]
    )
    body += struct.pack("<Q", xxhash.xxh3_64_intdigest(body))
    path = summary_path(region_path)
    tmp = f"{path}.tmp"
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb") as f:
            f.write(body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_summary(region_path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(summary_path(region_path))


def read_summary(region_path: str, rid: int, region_size: int, epoch: int) -> RegionSummary | None:
    """The region's summary when it is valid for the region as it is on disk now, else None."""
    try:
        with open(summary_path(region_path), "rb") as f:
            data = f.read()
        with open(region_path, "rb") as f:
            head = f.read(BLOCK)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    header, _ = parse_region_header(head)
    if (
        header is None
        or header.region_id != rid
        or header.region_size != region_size
        or header.epoch != epoch
    ):
        return None
    if len(data) < _HDR.size + 8 or data[:8] != MAGIC:
        return None
    if struct.unpack_from("<Q", data, len(data) - 8)[0] != xxhash.xxh3_64_intdigest(memoryview(data)[:-8]):
        return None
    _m, ver, _p, s_rid, gen, s_epoch, n, flags, end = _HDR.unpack_from(data, 0)
    if (
        ver != VERSION
        or s_rid != rid
        or gen != header.gen
        or s_epoch != epoch
        or end > min(size, region_size)
    ):
        return None
    pos = _HDR.size
    arrays = []
    for _ in range(3):
        arrays.append(np.frombuffer(data, np.uint64, n, pos))
        pos += 8 * n
    if n and (int(arrays[0].max()) >= end or int(arrays[1].max()) > end):
        return None  # entries beyond what the region holds: not this region's index
    keys: list[str]
    if flags & _NUL_KEYS:
        keys = data[pos:-8].decode("utf-8", "surrogateescape").split("\0") if n else []
        if len(keys) != n:
            return None
    else:
        klens = np.frombuffer(data, np.uint16, n, pos).tolist()
        pos += 2 * n
        keys = []
        for kl in klens:
            keys.append(data[pos : pos + kl].decode("utf-8", "surrogateescape"))
            pos += kl
        if pos != len(data) - 8:
            return None
    return RegionSummary(header, size, end, keys, arrays[0], arrays[1], arrays[2])
