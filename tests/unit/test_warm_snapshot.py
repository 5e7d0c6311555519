"""The warm snapshot's file format: what is written is read back, column for column; what the
format cannot hold is left out; version 1 files are still read; a damaged file is refused."""

from __future__ import annotations

import json
import random
import struct

import pytest
import xxhash

from hicache_mooncake.tiers.warm_snapshot import MAGIC, decode, encode


def _pages(n: int, seed: int) -> list[tuple[str, int, bool]]:
    rng = random.Random(seed)
    alphabet = "0123456789abcdef-_:é漢😀"
    pages = [
        (
            "".join(rng.choices(alphabet, k=rng.randrange(0, 90))),
            rng.randrange(0, 1 << 32),
            rng.random() < 0.3,
        )
        for _ in range(n)
    ]
    pages[0] = ("", 0, True)
    pages[1] = ("😀" * 1024, (1 << 32) - 1, False)  # the longest key: 4 KiB of UTF-8
    pages[2] = ("lone \udc80 surrogate", 4096, True)
    return pages


def _columns(pages: list[tuple[str, int, bool]]) -> tuple[list[str], list[int], list[bool]]:
    return [p[0] for p in pages], [p[1] for p in pages], [p[2] for p in pages]


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 10_001])
def test_every_page_comes_back_in_order(n: int) -> None:
    pages = _pages(max(n, 3), seed=n)[:n]
    snap = decode(encode({"epoch": 3, "region_size": 1 << 26}, pages))
    assert (snap.keys, snap.sizes, snap.in_dram) == _columns(pages)
    assert snap.header["entries"] == n and snap.header["epoch"] == 3 and len(snap) == n


def test_pages_the_format_cannot_hold_are_left_out_and_the_rest_kept() -> None:
    pages = _pages(9000, seed=1)
    bad = {
        5: ("nul\0inside", 1, True),
        4100: ("k" * 1025, 1, False),
        7000: ("neg", -1, True),
        8999: ("big", 1 << 32, False),
    }
    for i, page in bad.items():
        pages[i] = page
    snap = decode(encode({}, pages))
    kept = [p for i, p in enumerate(pages) if i not in bad]
    assert (snap.keys, snap.sizes, snap.in_dram) == _columns(kept)
    assert snap.header["entries"] == len(kept)


def _file(version: int, header: dict, body: bytes) -> bytes:
    head = json.dumps(header).encode()
    data = struct.pack("<8sHI", MAGIC, version, len(head)) + head + body
    return data + struct.pack("<Q", xxhash.xxh3_64_intdigest(data))


def test_a_version_1_file_of_the_previous_release_is_still_read() -> None:
    pages = _pages(600, seed=2)[3:]
    body = b"".join(
        struct.pack("<BIH", int(d), size, len(key.encode())) + key.encode() for key, size, d in pages
    )
    snap = decode(_file(1, {"epoch": 1, "entries": len(pages)}, body))
    assert (snap.keys, snap.sizes, snap.in_dram) == _columns(pages)


def test_any_damage_is_refused_never_read_as_other_pages() -> None:
    data = encode({"epoch": 1}, _pages(300, seed=3))
    rng = random.Random(4)
    for _ in range(300):
        bad = bytearray(data)
        if rng.random() < 0.5:
            bad = bad[: rng.randrange(0, len(bad))]
        else:
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        with pytest.raises(ValueError):
            decode(bytes(bad))


@pytest.mark.parametrize(
    ("header", "body", "why"),
    [
        ({"entries": 2}, b"\1\0" + struct.pack("<2I", 1, 2) + b"a\0", "entry count"),  # one key short
        ({"entries": 1}, b"\1" + struct.pack("<I", 1) + b"a\0b\0", "entry count"),  # one key too many
        ({"entries": 1}, b"\1" + struct.pack("<I", 1) + b"a", "NUL"),
        ({"entries": 9}, b"\1" + struct.pack("<I", 1) + b"a\0", "entry count"),  # columns cut short
        ({"entries": 1}, b"\1" + struct.pack("<I", 1) + b"x" * (300 << 10) + b"\0", "longer"),
        ({}, b"", "no entry count"),
        ({"entries": 1}, b"", "entry count"),
    ],
)
def test_a_consistent_checksum_over_inconsistent_columns_is_refused(
    header: dict, body: bytes, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        decode(_file(2, header, body))


def test_an_unknown_version_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="format version 3"):
        decode(_file(3, {"entries": 0}, b""))
