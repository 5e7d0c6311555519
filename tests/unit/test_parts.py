"""Moving a page's parts to and from one slot: flat byte views go through the fast path, any other
contiguous view (typed, multi-dimensional) as its raw bytes; a strided byte view moves in its
logical order, a strided typed one is refused (it has no raw bytes to move)."""

from __future__ import annotations

import numpy as np
import pytest

from hicache_mooncake.tiers.parts import gather, pages_nbytes, pages_sizes, parts_nbytes, scatter


def test_parts_of_every_shape_round_trip_as_raw_bytes() -> None:
    rng = np.random.default_rng(5)
    flat = rng.integers(0, 256, 40, dtype=np.uint8)
    typed = rng.random(24, dtype=np.float32)
    square = rng.random((4, 6), dtype=np.float64)
    parts = [memoryview(flat), memoryview(typed), memoryview(square)]
    slot = np.zeros(parts_nbytes(parts), np.uint8)
    gather(slot, parts)
    assert slot.tobytes() == flat.tobytes() + typed.tobytes() + square.tobytes()
    back = [np.zeros_like(flat), np.zeros_like(typed), np.zeros_like(square)]
    scatter(slot, [memoryview(b) for b in back])
    for got, want in zip(back, (flat, typed, square), strict=True):
        assert np.array_equal(got, want)


def test_a_strided_byte_part_moves_in_order_and_a_strided_typed_one_is_refused() -> None:
    source = np.arange(32, dtype=np.uint8)
    slot = np.zeros(16, np.uint8)
    gather(slot, [memoryview(source[::2])])
    assert np.array_equal(slot, source[::2])
    into = np.zeros(32, np.uint8)
    scatter(slot, [memoryview(into[1::2])])
    assert np.array_equal(into[1::2], source[::2]) and not into[::2].any()
    typed = memoryview(np.zeros((4, 4), np.float32)[:, :2])
    with pytest.raises(TypeError):
        gather(np.zeros(32, np.uint8), [typed])
    with pytest.raises(TypeError):
        scatter(np.zeros(32, np.uint8), [typed])


def test_page_sizes_in_one_pass() -> None:
    a, b = memoryview(bytearray(10)), memoryview(np.zeros(3, np.float32))
    pages = [[a, b], [b], []]
    assert pages_sizes(pages) == [22, 12, 0]
    assert pages_nbytes(pages) == 34
    assert pages_nbytes(pages, [False, True, True]) == 12
