"""``transport.batch_copy``: a batch of pages that are slices of one pool buffer (as SGLang's host
pool views are, numpy or torch) crosses into native code once, its bytes land exactly, in part
order, both ways; a range outside the large buffer is refused naming the item and moves no byte
of the batch; views that cannot be located (read-only bytes) still copy exactly. The ``local``
engine on a real node's arena fails only the items outside it, and nothing past its deadline."""

from __future__ import annotations

import mmap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from transport_procs import SECRET, NodeProc

from hicache_mooncake.transport import ClientOptions, NodeClient
from hicache_mooncake.transport.batch_copy import copy_into, copy_out, locate
from hicache_mooncake.transport.local import LocalEngine

PAGE = 4096


def arena(n: int) -> memoryview:
    return memoryview(mmap.mmap(-1, n))


def test_pages_of_one_pool_buffer_are_one_native_copy_each_way() -> None:
    pool = np.random.default_rng(1).integers(0, 256, 64 * PAGE, dtype=np.uint8)
    rows = [9, 2, 63, 40, 2]
    views = [pool.data[r * PAGE : (r + 1) * PAGE] for r in rows]
    slots = [0, 5 * PAGE, PAGE, 3 * PAGE, 8 * PAGE]
    big = arena(16 * PAGE)
    where = copy_into(big, slots, views)
    assert len(where.groups) == 1 and where.loose == []
    for r, slot in zip(rows, slots, strict=True):
        assert big[slot : slot + PAGE] == pool[r * PAGE : (r + 1) * PAGE].tobytes()
    out = np.zeros_like(pool)
    back = [out.data[i * PAGE : (i + 1) * PAGE] for i in range(len(rows))]
    where = copy_out(big, slots, back)
    assert len(where.groups) == 1 and where.loose == []
    for i, r in enumerate(rows):
        assert np.array_equal(out[i * PAGE : (i + 1) * PAGE], pool[r * PAGE : (r + 1) * PAGE])
    assert not out[len(rows) * PAGE :].any()  # nothing past the pages written


def test_split_k_and_v_torch_buffers_are_one_native_copy_per_buffer() -> None:
    k = torch.arange(32 * 1024, dtype=torch.int32).reshape(32, 1024)  # 4 KiB rows
    v = -k
    kb, vb = (t.view(torch.uint8).numpy().reshape(-1) for t in (k, v))
    rows = [5, 31, 0]
    views = [
        p for r in rows for p in (kb.data[r * PAGE : (r + 1) * PAGE], vb.data[r * PAGE : r * PAGE + 1000])
    ]
    slots = [off for j in range(len(rows)) for off in (j * 2 * PAGE, j * 2 * PAGE + PAGE)]
    big = arena(8 * PAGE)
    assert len(copy_into(big, slots, views).groups) == 2
    for j, r in enumerate(rows):
        assert big[j * 2 * PAGE : j * 2 * PAGE + PAGE] == k[r].numpy().tobytes()
        assert big[j * 2 * PAGE + PAGE : j * 2 * PAGE + PAGE + 1000] == v[r].numpy().tobytes()[:1000]


def test_a_range_outside_the_buffer_names_the_item_and_moves_no_byte() -> None:
    pool = np.arange(8 * PAGE, dtype=np.uint32).view(np.uint8)
    views = [pool.data[i * PAGE : (i + 1) * PAGE] for i in range(3)]
    big = arena(4 * PAGE)
    with pytest.raises(ValueError, match=r"copy 2: offset 12289 \+ length 4096 outside a buffer of 16384"):
        copy_into(big, [0, PAGE, 3 * PAGE + 1], views)
    assert not any(big)  # not even the items before the bad one
    big[:] = b"\x07" * len(big)
    before = pool.copy()
    with pytest.raises(ValueError, match="copy 0: offset -1"):
        copy_out(big, [-1, 0, PAGE], views)
    assert np.array_equal(pool, before)
    with pytest.raises(ValueError, match="2 offsets for 3 views"):
        copy_out(big, [0, PAGE], views)


def test_read_only_and_zero_length_views_copy_exactly_in_python() -> None:
    data = bytes(range(256)) * 40
    pool = np.full(PAGE, 9, dtype=np.uint8)
    views = [memoryview(data)[:5000], pool.data[0:0], memoryview(data)[5000:], pool.data[:100]]
    where = locate(views)
    assert where.loose == [0, 2] and [idx.tolist() for _, idx, _ in where.groups] == [[3]]
    big = arena(4 * PAGE)
    copy_into(big, [PAGE, 0, PAGE + 5000, 0], views)
    assert big[PAGE : PAGE + len(data)] == data and big[:100] == b"\x09" * 100
    readonly = memoryview(bytes(100))
    with pytest.raises(TypeError):
        copy_out(big, [0], [readonly])  # a read-only destination is refused, not silently skipped


@pytest.mark.integration
def test_the_local_engine_fails_only_items_outside_the_arena_and_moves_nothing_past_its_deadline(
    tmp_path: Path,
) -> None:
    """Against a real node's mapped arena: a batch read with one extent past the arena's end
    copies the others (one native copy) and leaves that item's buffer untouched; a batch whose
    deadline has passed fails every item and writes no byte."""
    node = NodeProc(tmp_path, "batch-node", None, "t", capacity="4MiB").start()
    c = NodeClient("127.0.0.1", node.port, ClientOptions(timeout_s=2.0, secret=SECRET.encode()), "local")
    try:
        page = np.random.default_rng(5).integers(0, 256, PAGE, dtype=np.uint8)
        assert c.put_batch([("p", [page.data])]) == [True]
        [ref] = c.lookup_batch(["p"])
        engine = c.engine
        assert isinstance(engine, LocalEngine) and ref.found
        out = np.full(4 * PAGE, 0xAB, dtype=np.uint8)
        parts = [out.data[i * PAGE : (i + 1) * PAGE] for i in range(4)]
        before = engine.counters["native_copies"]
        far = time.monotonic() + 5
        extents = [
            (ref.offset, [parts[0]]),
            (1 << 40, [parts[1]]),
            (-1, [parts[2]]),
            (ref.offset, [parts[3]]),
        ]
        assert engine.read("batch-node", extents, far) == [True, False, False, True]
        assert np.array_equal(out[:PAGE], page) and np.array_equal(out[3 * PAGE :], page)
        assert (out[PAGE : 3 * PAGE] == 0xAB).all()
        assert engine.counters["native_copies"] == before + 1
        out[:] = 0xCD
        assert engine.read("batch-node", extents[:1], time.monotonic() - 0.001) == [False]
        assert (out == 0xCD).all()
    finally:
        c.close()
        node.stop()
