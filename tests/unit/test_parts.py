"""A page's size is the bytes of its parts together, whatever their kind (flat, typed, strided)."""

from __future__ import annotations

import numpy as np

from hicache_mooncake.tiers.parts import pages_nbytes, pages_sizes


def test_page_sizes_in_one_pass() -> None:
    a, b = memoryview(bytearray(10)), memoryview(np.zeros(3, np.float32))
    strided = memoryview(np.zeros(16, np.uint8)[::2])
    pages = [[a, b], [b], [], (strided,)]
    assert pages_sizes(pages) == [22, 12, 0, 8]
    assert pages_sizes(iter(pages)) == [22, 12, 0, 8]
    assert pages_nbytes(pages) == 42
    assert pages_nbytes(pages, [False, True, True, False]) == 12
