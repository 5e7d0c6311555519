"""Batch copies: the bytes numpy slicing gives, all-or-nothing bounds errors naming the item,
and the GIL released while a big copy runs, kept for a short one."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from gil_probe import progress_during

from hicache_mooncake import native


def random_pages(
    rng: np.random.Generator, n: int, src_size: int, dst_size: int
) -> tuple[list[int], list[int], list[int]]:
    lengths = [int(rng.integers(0, 5000)) for _ in range(n)]
    src_off = [int(rng.integers(0, src_size - ln + 1)) for ln in lengths]
    dst_off = [int(rng.integers(0, dst_size - ln + 1)) for ln in lengths]
    return dst_off, src_off, lengths


def test_copies_equal_numpy_slicing_in_order() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        src = rng.integers(0, 256, size=64 * 1024, dtype=np.uint8)
        dst = rng.integers(0, 256, size=48 * 1024, dtype=np.uint8)
        want = dst.copy()
        dst_off, src_off, lengths = random_pages(rng, int(rng.integers(0, 40)), src.size, dst.size)
        for d, s, n in zip(dst_off, src_off, lengths, strict=True):
            want[d : d + n] = src[s : s + n]
        native.copy_pages(dst, dst_off, src, src_off, lengths)
        assert np.array_equal(dst, want)


def test_large_copies_bypass_the_caches_and_land_byte_for_byte() -> None:
    """A call of 1 MiB or more in items of 4 KiB or more writes with non-temporal stores (the
    aligned middle of each item; its unaligned head and its tail by memcpy): every offset
    alignment and length remainder lands exactly, a smaller item of the same call too, and ranges
    of one buffer that overlap are still copied as by memmove."""
    rng = np.random.default_rng(13)
    src = rng.integers(0, 256, size=4 << 20, dtype=np.uint8)
    for _ in range(6):
        dst = rng.integers(0, 256, size=8 << 20, dtype=np.uint8)
        want = dst.copy()
        lengths = [int(rng.integers(4096, 300_000)) for _ in range(10)] + [100, 4095, 4097, 64 * 1024 + 63]
        slots = np.sort(rng.choice(16, size=len(lengths), replace=False)) << 19  # 512 KiB apart
        dst_off = [int(o) + int(rng.integers(0, 64)) for o in slots]  # every alignment mod 16 and 64
        src_off = [int(rng.integers(0, src.size - n)) for n in lengths]
        assert sum(lengths) >= 1 << 20
        for d, s, n in zip(dst_off, src_off, lengths, strict=True):
            want[d : d + n] = src[s : s + n]
        native.copy_pages(dst, dst_off, src, src_off, lengths)
        assert np.array_equal(dst, want)
    buf = rng.integers(0, 256, size=4 << 20, dtype=np.uint8)
    want = buf.copy()
    want[8 : 8 + (2 << 20)] = buf[0 : 2 << 20].copy()  # overlapping, forwards
    native.copy_pages(buf, [8], buf, [0], [2 << 20])
    assert np.array_equal(buf, want)


def test_mmap_and_memoryview_buffers() -> None:
    with mmap.mmap(-1, 8192) as mm:
        native.copy_pages(mm, [4096], memoryview(b"abc" * 100), [0], [300])
        assert mm[4096:4396] == b"abc" * 100


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"src_off": [0, 0, 0, -1]}, ValueError, r"src_offsets\[3\] is negative: -1"),
        (
            {"dst_off": [0, 0, 0, 2**64 - 1]},
            ValueError,
            r"copy 3: dst offset 18446744073709551615 \+ length 10 > buffer size 4096",
        ),
        (
            {"lengths": [10, 10, 10, 2**64 - 1]},
            ValueError,
            r"copy 3: src offset 0 \+ length 18446744073709551615 > buffer size 4096",
        ),
        (
            {"src_off": [0, 0, 0, 4090]},
            ValueError,
            r"copy 3: src offset 4090 \+ length 10 > buffer size 4096",
        ),
        ({"dst": bytes(4096)}, TypeError, "dst is read-only"),
        (
            {"lengths": np.array([10.0] * 4)},
            TypeError,
            "lengths must be an array of non-negative integers, got dtype float64",
        ),
        ({"lengths": [10, 10]}, ValueError, "lengths has 2 elements but dst_offsets has 4"),
        ({"src": np.zeros(8)[::2]}, TypeError, "src is not C-contiguous"),
    ],
)
def test_bad_copies_raise_naming_the_item_and_copy_nothing(change: dict, error: type, match: str) -> None:
    args = {
        "dst": np.zeros(4096, dtype=np.uint8),
        "dst_off": [0, 100, 200, 300],
        "src": np.full(4096, 7, dtype=np.uint8),
        "src_off": [0, 0, 0, 0],
        "lengths": [10, 10, 10, 10],
    }
    args.update(change)
    with pytest.raises(error, match=match):
        native.copy_pages(args["dst"], args["dst_off"], args["src"], args["src_off"], args["lengths"])
    if isinstance(args["dst"], np.ndarray):
        assert not args["dst"].any()  # the valid copies before the bad one did not run either


def test_the_gil_is_released_during_a_big_copy() -> None:
    """Another Python thread makes progress while one 256 MiB copy_pages runs (gil_probe)."""
    size = 256 << 20
    src = np.ones(size, dtype=np.uint8)
    dst = np.empty(size, dtype=np.uint8)
    assert progress_during(lambda: native.copy_pages(dst, [0], src, [0], [size])) > 0
    assert dst[0] == 1 and dst[-1] == 1


def test_a_short_copy_keeps_the_gil() -> None:
    """Up to 64 KiB in all, a copy (and its checksum) runs with the GIL held: giving it away would
    cost the caller a switch interval to get back."""
    src = np.arange(64 * 1024, dtype=np.uint8)
    dst = np.zeros_like(src)
    offs = [0, 16384, 32768, 49152]
    assert progress_during(lambda: native.copy_pages(dst, offs, src, offs, [16384] * 4), attempts=5) == 0
    assert np.array_equal(dst, src)


def test_view_spans_are_the_addresses_and_lengths_of_writable_views() -> None:
    """What ``transport.batch_copy`` locates a batch with: one call, the same addresses numpy
    reports; any view it cannot vouch for (read-only, empty, strided, released) makes it None."""
    arr = np.zeros(4096, dtype=np.uint8)
    whole = memoryview(arr)
    views = [whole[0:10], whole[100:356], whole[4000:4096]]
    spans = native.view_spans(views)
    assert spans is not None
    base = arr.ctypes.data
    assert spans.tolist() == [[base, 10], [base + 100, 256], [base + 4000, 96]]
    assert native.view_spans([]) is not None and native.view_spans([]).shape == (0, 2)
    released = whole[0:8]
    released.release()
    strided = memoryview(arr.reshape(64, 64)[:, :8])
    for odd in (memoryview(b"read-only"), whole[5:5], strided, released):
        assert native.view_spans([views[0], odd]) is None
    with pytest.raises(TypeError):
        native.view_spans(42)  # type: ignore[arg-type]
