"""Payload checksums now come from the native extension (batch copy + xxh3 on the write path,
batch xxh3 on the read path) and are the same values as python-xxhash's: what this engine writes
is verified by python-xxhash byte for byte (so an older engine reads it), whatever the payload's
shape (one part, parts back to back in one buffer, parts in separate buffers; staged or written
in place) and whatever the read path (straight into the caller's memory, or bounced through
engine memory with a deadline). The other direction, a store an older engine wrote opening and
serving every page, is ``test_ssd_compat.py`` (a fixture store of format 1)."""

from __future__ import annotations

import glob
import os
import time

import numpy as np
import pytest
import xxhash
from ssd_helpers import aligned_array, open_engine

from hicache_mooncake.ssd.format import BLOCK, parse_entry_header, parse_region_header


def _payloads() -> dict[str, list[memoryview]]:
    rng = np.random.default_rng(49)
    pool = aligned_array(1 << 20)
    pool[:] = rng.integers(0, 256, pool.size, dtype=np.uint8)
    mv = memoryview(pool)
    apart = [aligned_array(8192), aligned_array(4096)]
    for a in apart:
        a[:] = rng.integers(0, 256, a.size, dtype=np.uint8)
    out: dict[str, list[memoryview]] = {f"one-{i}": [mv[i * 65536 : i * 65536 + 12288 + i]] for i in range(6)}
    out["back-to-back"] = [mv[512 << 10 : (512 << 10) + 8192], mv[(512 << 10) + 8192 : (512 << 10) + 12288]]
    out["gapped"] = [mv[600 << 10 : (600 << 10) + 4096], mv[700 << 10 : (700 << 10) + 4096]]
    out["separate"] = [memoryview(a) for a in apart]
    out["tiny"] = [memoryview(b"seven b")]
    return out


def _entries_on_disk(directory: str) -> dict[str, tuple[int, int]]:
    """key -> (payload hash in the header, python-xxhash of the payload bytes on disk)."""
    found: dict[str, tuple[int, int]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "region-*.bin"))):
        with open(path, "rb") as f:
            data = f.read()
        head, _ = parse_region_header(data[:BLOCK])
        if head is None:
            continue
        pos = BLOCK
        while pos + BLOCK <= len(data):
            h, _ = parse_entry_header(data[pos : pos + BLOCK])
            if h is None or h.gen != head.gen:
                pos += BLOCK
                continue
            payload = data[pos + BLOCK : pos + BLOCK + h.payload_len]
            found[h.key.decode()] = (h.payload_hash, xxhash.xxh3_64_intdigest(payload))
            pos += h.size
    return found


@pytest.mark.parametrize("stage_writes", ["always", "never"])
def test_written_checksums_are_python_xxhash_values_and_every_read_path_verifies_them(
    ssd_dir: str, stage_writes: str
) -> None:
    payloads = _payloads()
    opts = {
        "capacity_bytes": 8 << 20,
        "region_size": 2 << 20,
        "stage_writes": stage_writes,
        "direct_io": "off",
    }
    e = open_engine(ssd_dir, **opts)
    try:
        assert all(e.put_batch(list(payloads.items())))
        assert e.stats()["batches_staged" if stage_writes == "always" else "batches_zero_copy"] >= 1
    finally:
        e.close()
    on_disk = _entries_on_disk(ssd_dir)
    assert set(on_disk) == set(payloads)
    for key, parts in payloads.items():
        header_hash, disk_hash = on_disk[key]
        assert header_hash == disk_hash == xxhash.xxh3_64_intdigest(b"".join(bytes(p) for p in parts)), key
    e = open_engine(ssd_dir, **opts)
    try:
        for deadline in (None, time.monotonic() + 30):  # in place, then bounced through the engine
            outs = {k: [aligned_array(p.nbytes) for p in parts] for k, parts in payloads.items()}
            items = [(k, [memoryview(a) for a in outs[k]]) for k in payloads]
            assert all(e.get_batch_into(items, deadline=deadline))
            for k, parts in payloads.items():
                assert b"".join(a.tobytes() for a in outs[k]) == b"".join(bytes(p) for p in parts), k
        assert e.stats()["read_checksum_errors"] == 0
    finally:
        e.close()


def test_a_flipped_payload_byte_fails_the_native_check(ssd_dir: str) -> None:
    """The batch check still tells one bad entry among good ones: a miss for it alone."""
    payloads = _payloads()
    opts = {"capacity_bytes": 8 << 20, "region_size": 2 << 20, "direct_io": "off"}
    e = open_engine(ssd_dir, **opts)
    try:
        assert all(e.put_batch(list(payloads.items())))
        loc = e._core.index.get("one-3")
        assert loc is not None
        path = e._core.regions[loc.region].path
    finally:
        e.close()
    with open(path, "r+b") as f:
        f.seek(loc.offset + BLOCK + 100)
        b = f.read(1)[0]
        f.seek(loc.offset + BLOCK + 100)
        f.write(bytes([b ^ 1]))
    e = open_engine(ssd_dir, **opts)
    try:
        outs = {k: [aligned_array(p.nbytes) for p in parts] for k, parts in payloads.items()}
        got = e.get_batch_into(
            [(k, [memoryview(a) for a in outs[k]]) for k in payloads], deadline=time.monotonic() + 30
        )
        assert [k for k, ok in zip(payloads, got, strict=True) if not ok] == ["one-3"]
        assert e.stats()["read_checksum_errors"] == 1
    finally:
        e.close()
