"""Pages to and from arena slots in one native call (the DRAM tier's copy): each page's parts land
back to back in its slot, byte for byte as a part-by-part reference model copies them; parts of
any C-contiguous kind (pool tensor slices, typed and multi-dimensional views, read-only sources)
move as raw bytes; a bad page, part or range fails the whole call before any byte moves; a big
batch runs with the GIL released, a short one keeps it."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
import torch
from gil_probe import progress_during
from reference_models import ref_copy_slots

from hicache_mooncake import native


def arena(n: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, n), np.uint8)


def test_pages_from_two_pool_tensors_round_trip_through_the_arena() -> None:
    k = torch.arange(64 * 1024, dtype=torch.int32).reshape(64, 1024)  # 4 KiB rows, like a K buffer
    v = -torch.arange(64 * 1024, dtype=torch.int32).reshape(64, 1024)
    kb, vb = k.view(torch.uint8).numpy().reshape(-1), v.view(torch.uint8).numpy().reshape(-1)
    rows = [3, 17, 17, 40, 63]
    pages = [[kb.data[r * 4096 : (r + 1) * 4096], vb.data[r * 4096 : r * 4096 + 1000]] for r in rows]
    slots = [0, 8192, 16384, 40960, 32768]
    mem = arena(64 << 10)
    native.copy_slots(mem, slots, pages, True)
    for r, slot in zip(rows, slots, strict=True):
        assert mem[slot : slot + 4096].tobytes() == k[r].numpy().tobytes()
        assert mem[slot + 4096 : slot + 5096].tobytes() == v[r].numpy().tobytes()[:1000]
    out_k, out_v = torch.zeros_like(k), torch.zeros_like(v)
    ok_, ov_ = out_k.view(torch.uint8).numpy().reshape(-1), out_v.view(torch.uint8).numpy().reshape(-1)
    back = [[ok_.data[i * 4096 : (i + 1) * 4096], ov_.data[i * 4096 : i * 4096 + 1000]] for i in range(5)]
    native.copy_slots(mem, slots, back, False)
    for i, r in enumerate(rows):
        assert torch.equal(out_k[i], k[r])
        assert out_v[i].numpy().tobytes()[:1000] == v[r].numpy().tobytes()[:1000]
    assert not out_v[5:].any() and not out_v[0].numpy().tobytes()[1000:].strip(b"\0")


def test_parts_of_every_contiguous_kind_move_as_raw_bytes() -> None:
    rng = np.random.default_rng(5)
    flat = rng.integers(0, 256, 40, dtype=np.uint8)
    typed = rng.random(24, dtype=np.float32)
    square = rng.random((4, 6), dtype=np.float64)
    ro = bytes(range(256)) * 3  # a read-only source
    mem = arena(8192)
    native.copy_slots(mem, [4096], ((memoryview(flat), memoryview(typed), square, ro),), True)
    want = flat.tobytes() + typed.tobytes() + square.tobytes() + ro
    assert mem[4096 : 4096 + len(want)].tobytes() == want
    back = [np.zeros_like(flat), np.zeros_like(typed), np.zeros_like(square), bytearray(len(ro))]
    native.copy_slots(mem, [4096], [back], False)
    for got, ref in zip(back[:3], (flat, typed, square), strict=True):
        assert np.array_equal(got, ref)
    assert bytes(back[3]) == ro
    assert native.page_sizes([[memoryview(flat), typed], [], [square, ro]]) == [40 + 96, 0, 192 + 768]
    with pytest.raises(BufferError, match=r"pages\[1\]\[0\]: not a buffer"):
        native.page_sizes([[ro], [3]])


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_equal_the_part_by_part_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = 1 << 20
    slot = 16 << 10
    n = int(rng.integers(1, 40))
    slots = (rng.permutation(size // slot)[:n] * slot).tolist()
    pages: list[list[bytes]] = []
    for _ in range(n):
        lengths = rng.integers(0, 6000, int(rng.integers(0, 4)))
        lengths = lengths[: max(0, int(np.searchsorted(np.cumsum(lengths), slot, side="right")))]
        pages.append([rng.integers(0, 256, int(ln), dtype=np.uint8).tobytes() for ln in lengths])
    mem = arena(size)
    ref = bytearray(size)
    native.copy_slots(mem, slots, pages, True)
    ref_copy_slots(ref, slots, pages, True)
    assert mem.tobytes() == bytes(ref)
    outs = [[bytearray(len(p)) for p in parts] for parts in pages]
    native.copy_slots(mem, slots, outs, False)
    assert [[bytes(p) for p in parts] for parts in outs] == ref_copy_slots(ref, slots, pages, False)
    assert native.page_sizes(pages) == [sum(map(len, parts)) for parts in pages]


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        (
            "past_the_end",
            ValueError,
            r"pages\[1\]\[1\]: arena offset 8192 \+ length 100 outside an arena of 8192",
        ),
        ("read_only_destination", BufferError, r"pages\[1\]\[0\]: not one writable C-contiguous buffer"),
        ("strided_part", BufferError, r"pages\[1\]\[0\]: not one C-contiguous buffer"),
        ("not_a_page", TypeError, r"pages\[1\] must be a sequence of buffers, got int"),
        ("fewer_slots", ValueError, r"slot_offsets"),
        ("negative_slot", ValueError, r"slot_offsets\[1\] is negative"),
        ("read_only_arena", TypeError, r"arena is read-only"),
    ],
)
def test_a_bad_batch_raises_naming_the_item_and_copies_nothing(case: str, error: type, match: str) -> None:
    mem = arena(8192)
    into = True
    target: object = mem
    slots: list[int] = [0, 8192 - 100]
    pages: list[object] = [[np.full(100, 7, np.uint8)], [np.full(100, 9, np.uint8)]]
    if case == "past_the_end":
        slots = [0, 8192]
        pages[1] = [np.zeros(0, np.uint8), np.ones(100, np.uint8)]
    elif case == "read_only_destination":
        into = False
        mem[:] = 5
        pages = [[np.zeros(100, np.uint8)], [bytes(100)]]
    elif case == "strided_part":
        pages[1] = [np.ones(200, np.uint8)[::2]]
    elif case == "not_a_page":
        pages[1] = 3
    elif case == "fewer_slots":
        slots = [0]
    elif case == "negative_slot":
        slots = [0, -4096]
    elif case == "read_only_arena":
        target = bytes(8192)
    with pytest.raises(error, match=match):
        native.copy_slots(target, slots, pages, into)
    if into:
        assert not mem.any()  # the valid page before the bad one was not copied either
    else:
        assert not pages[0][0].any()  # type: ignore[index]


def test_the_gil_is_released_during_a_big_batch_and_kept_for_a_short_one() -> None:
    pool = np.ones(256 << 20, np.uint8)
    mem = arena(256 << 20)
    pages = [[pool[i << 20 : (i + 1) << 20]] for i in range(256)]
    slots = [i << 20 for i in range(256)]
    assert progress_during(lambda: native.copy_slots(mem, slots, pages, True)) > 0
    assert mem[0] == 1 and mem[-1] == 1
    short = [[pool[:16384]] for _ in range(4)]
    assert (
        progress_during(lambda: native.copy_slots(mem, [0, 16384, 32768, 49152], short, True), attempts=5)
        == 0
    )
