"""Zero-copy writes: aligned caller memory is written in place (O_DIRECT), unaligned memory is
staged; with ``stage_writes: auto`` only memory registered and found on huge pages is written in
place; a get of a pending entry copies from the caller's memory, and the put does not return
while such a copy is running."""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np
from ssd_helpers import aligned_array, open_engine, stall_writes, value_for

from hicache_mooncake.ssd.buffer import WriteBuffer
from hicache_mooncake.ssd.hugemem import huge_fraction
from hicache_mooncake.ssd.io import address_of, huge_buffer


def _aligned_value(key: str, size: int) -> np.ndarray:
    arr = aligned_array(size)
    arr[:] = value_for(key, size)
    return arr


def _small_pages_value(key: str, size: int) -> np.ndarray:
    """``size`` bytes of ``key``'s value in a mapping of its own advised off huge pages: memory
    from the malloc heap may sit in a range an earlier large numpy array advised onto huge pages
    (numpy does that from 4 MiB), and THP then backs it with huge pages after all."""
    mapping = mmap.mmap(-1, size)
    mapping.madvise(mmap.MADV_NOHUGEPAGE)
    arr = np.frombuffer(mapping, np.uint8)
    arr[:] = value_for(key, size)
    return arr


def test_aligned_parts_are_written_in_place_and_round_trip(ssd_dir: str) -> None:
    with open_engine(ssd_dir, capacity_bytes=16 << 20, region_size=4 << 20, stage_writes="never") as e:
        vals = {f"k{i}": _aligned_value(f"k{i}", 256 << 10) for i in range(8)}
        # two aligned parts per object, as SGLang's page-first host pool hands them out
        items = [(k, [memoryview(v[: 128 << 10]), memoryview(v[128 << 10 :])]) for k, v in vals.items()]
        assert all(e.put_batch(items))
        unaligned = np.frombuffer(bytearray(value_for("u", 50_000).tobytes()), np.uint8)
        assert e.put("u", [memoryview(unaligned[1:])])
        st = e.stats()
        if st["io_mode"] == "direct":
            assert st["batches_zero_copy"] == 1 and st["batches_staged"] == 1
        for k, v in vals.items():
            out = aligned_array(v.size)
            assert e.get_into(k, [memoryview(out)]) and np.array_equal(out, v)
        out = np.zeros(49_999, np.uint8)
        assert e.get_into("u", [memoryview(out)]) and np.array_equal(out, unaligned[1:])
    with open_engine(ssd_dir, capacity_bytes=16 << 20, region_size=4 << 20) as e2:  # reopen verifies
        for k, v in vals.items():
            out = aligned_array(v.size)
            assert e2.get_into(k, [memoryview(out)]) and np.array_equal(out, v)


def test_zero_copy_off_stages_everything(ssd_dir: str) -> None:
    with open_engine(ssd_dir, zero_copy_writes=False) as e:
        v = _aligned_value("a", 64 << 10)
        assert e.put("a", [memoryview(v)])
        assert e.stats().get("batches_zero_copy", 0) == 0 and e.stats()["batches_staged"] == 1
        out = aligned_array(v.size)
        assert e.get_into("a", [memoryview(out)]) and np.array_equal(out, v)


def test_pending_get_copies_from_caller_memory(ssd_dir: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    gate, entered = stall_writes(monkeypatch)
    v = _aligned_value("zc", 64 << 10)
    res: list[bool] = []
    t = threading.Thread(
        target=lambda: res.append(e.put("zc", [memoryview(v[:32768]), memoryview(v[32768:])]))
    )
    t.start()
    assert entered.wait(10)
    out = np.zeros(v.size, np.uint8)
    assert e.get_into("zc", [memoryview(out[:1000]), memoryview(out[1000:])])
    assert np.array_equal(out, v)
    assert e.stats()["hits_from_write_buffer"] == 1
    gate.set()
    t.join(10)
    assert res == [True]
    monkeypatch.undo()
    e.close()


def test_auto_writes_in_place_only_memory_found_on_huge_pages(ssd_dir: str) -> None:
    """``stage_writes: auto``: 4 KiB-page memory is staged (a disk takes it as one segment per
    page); memory registered and found on huge pages is written in place; both round trip."""
    huge = np.frombuffer(huge_buffer(4 << 20), np.uint8)
    huge[:] = value_for("h", huge.size)
    plain = _small_pages_value("p", 1 << 20)
    with open_engine(ssd_dir, capacity_bytes=32 << 20, region_size=8 << 20) as e:
        assert e.register_memory(memoryview(plain)) < 0.9  # ordinary pages: not registered
        share = e.register_memory(memoryview(huge))
        assert e.put("p", [memoryview(plain)]) and e.put("h", [memoryview(huge[: 2 << 20])])
        st = e.stats()
        if st["io_mode"] == "direct":
            # staged: the 4 KiB-page memory; in place: the huge one, when THP gave huge pages here
            assert st["batches_staged"] == (1 if share >= 0.9 else 2)
            assert st.get("batches_zero_copy", 0) == (1 if share >= 0.9 else 0)
        out = aligned_array(1 << 20)
        assert e.get_into("p", [memoryview(out)]) and np.array_equal(out, plain)
        out2 = aligned_array(2 << 20)
        assert e.get_into("h", [memoryview(out2)]) and np.array_equal(out2, huge[: 2 << 20])


def test_huge_buffer_is_2mib_aligned_and_on_huge_pages_where_thp_allows() -> None:
    view = huge_buffer(3 << 20)
    assert view.nbytes == 4 << 20 and address_of(view) % (2 << 20) == 0
    with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
        thp = f.read()
    if "[never]" not in thp:
        assert huge_fraction(address_of(view), view.nbytes) >= 0.5


def test_borrowed_release_waits_for_readers() -> None:
    src = aligned_array(8192)
    buf = WriteBuffer(borrow=True)
    slot = buf.add(b"k", [memoryview(src)])
    assert buf.payload_views(slot)[0].obj is not None
    buf.acquire()  # a reader copying out of the caller's memory
    released = threading.Event()

    def writer() -> None:
        buf.drop(wait_readers=True)
        released.set()

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.1)
    assert not released.is_set()  # the put must not return while the reader copies
    buf.release()
    t.join(5)
    assert released.is_set()
