from __future__ import annotations

import pytest

from hicache_mooncake.ssd.format import (
    BLOCK,
    EntryHeader,
    RegionHeader,
    entry_size,
    parse_entry_header,
    parse_region_header,
)
from hicache_mooncake.ssd.options import SsdOptions


def test_entry_header_roundtrip_and_bitflips() -> None:
    buf = memoryview(bytearray(BLOCK))
    h = EntryHeader(b"model/abc/123", 1 << 20, 77, 5, 0xDEADBEEF)
    h.pack_into(buf)
    got, why = parse_entry_header(buf)
    assert got == h and why == ""
    for byte in range(0, 56 + len(h.key)):
        for bit in (0, 5):
            b = bytearray(buf)
            b[byte] ^= 1 << bit
            bad, why = parse_entry_header(b)
            assert bad is None, f"flip at byte {byte} bit {bit} not detected"


def test_region_header_roundtrip() -> None:
    buf = memoryview(bytearray(BLOCK))
    h = RegionHeader(3, 2, 99, 1 << 20, 123)
    h.pack_into(buf)
    assert parse_region_header(buf) == (h, "")
    b = bytearray(buf)
    b[20] ^= 1
    assert parse_region_header(b)[0] is None
    assert parse_region_header(bytes(BLOCK)) == (None, "region never written")


def test_entry_size_alignment() -> None:
    assert entry_size(0) == BLOCK
    assert entry_size(1) == 2 * BLOCK
    assert entry_size(BLOCK) == 2 * BLOCK
    assert entry_size(BLOCK + 1) == 3 * BLOCK


@pytest.mark.parametrize(
    "kw",
    [
        {"region_size": 1000},
        {"capacity_bytes": 1 << 20},
        {"direct_io": "maybe"},
        {"io_threads": 0},
        {"max_key_bytes": 5000},
        {"dirs": ()},
    ],
)
def test_options_validation(kw: dict[str, object]) -> None:
    base: dict[str, object] = {"dirs": ("/tmp/x",), "capacity_bytes": 4 << 20, "region_size": 1 << 20}
    base.update(kw)
    with pytest.raises(ValueError):
        SsdOptions(**base)  # type: ignore[arg-type]
