"""Pages of SGLang's host pool move to and from arena slots in one native copy per pool buffer:
parts that are slices of torch CPU tensors (as our pool views are) are located in their buffer;
the bytes land exactly, each page's parts back to back in its slot; parts that cannot be located
(read-only bytes) still copy exactly."""

from __future__ import annotations

import mmap

import numpy as np
import torch

from hicache_mooncake.tiers.part_copy import gather_pages, scatter_pages


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
    where = gather_pages(mem, slots, pages)
    assert len(where.groups) == 2 and not where.loose  # one native copy per pool tensor
    for r, slot in zip(rows, slots, strict=True):
        assert mem[slot : slot + 4096].tobytes() == k[r].numpy().tobytes()
        assert mem[slot + 4096 : slot + 5096].tobytes() == v[r].numpy().tobytes()[:1000]
    out_k, out_v = torch.zeros_like(k), torch.zeros_like(v)
    ok_, ov_ = out_k.view(torch.uint8).numpy().reshape(-1), out_v.view(torch.uint8).numpy().reshape(-1)
    back = [[ok_.data[i * 4096 : (i + 1) * 4096], ov_.data[i * 4096 : i * 4096 + 1000]] for i in range(5)]
    scatter_pages(mem, slots, back)
    for i, r in enumerate(rows):
        assert (
            torch.equal(out_k[i], k[r]) and out_v[i].numpy().tobytes()[:1000] == v[r].numpy().tobytes()[:1000]
        )


def test_read_only_parts_copy_exactly_without_the_native_path() -> None:
    data = bytes(range(256)) * 40
    pages = [[memoryview(data)[:5000], memoryview(data)[5000:]]]
    mem = arena(1 << 16)
    where = gather_pages(mem, [4096], pages)
    assert not where.groups and where.loose == [0, 1]
    assert mem[4096 : 4096 + len(data)].tobytes() == data


def test_pages_of_one_pool_tensor_are_one_native_copy_and_land_in_order() -> None:
    pool = torch.randint(0, 255, (16, 8192), dtype=torch.uint8)
    flat = pool.numpy().reshape(-1)
    pages = [
        [flat.data[r * 8192 : r * 8192 + 3000], flat.data[r * 8192 + 3000 : (r + 1) * 8192]]
        for r in (9, 2, 5)
    ]
    slots = [16384, 0, 8192]
    mem = arena(32 << 10)
    where = gather_pages(mem, slots, pages)
    assert len(where.groups) == 1 and not where.loose
    for r, slot in zip((9, 2, 5), slots, strict=True):
        assert mem[slot : slot + 8192].tobytes() == pool[r].numpy().tobytes()
