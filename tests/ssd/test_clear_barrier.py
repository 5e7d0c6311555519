"""``clear`` is a barrier: an operation that took bytes before a clear never publishes them into
any tier after it (issue 48, item 1).

Each test holds a real operation between its read and its publish (a hook around the real tier
call, released by an event), runs a real ``clear`` meanwhile, lets the operation finish, and then
checks that the page written before the clear is served by no tier, before and after a restart
of the SSD engine. Pages carry their generation in their bytes: a stale page can never pass as a
new one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAGE = 64 << 10
MiB = 1 << 20
HOLD_S = 10.0


def page(key: str, gen: int) -> np.ndarray:
    return np.frombuffer(f"{key}|gen{gen}".encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def parts(arr: np.ndarray) -> list[memoryview]:
    return [memoryview(arr)]


def engine_in(d: Path) -> SsdEngine:
    engine = SsdEngine(SsdOptions(dirs=(str(d),), capacity_bytes=16 * MiB, region_size=MiB, direct_io="off"))
    assert engine.wait_recovered(60)
    return engine


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ssd"
    d.mkdir()
    return d


@pytest.fixture
def store(store_dir: Path) -> Iterator[TieredStore]:
    s = TieredStore(
        [DramTier(MiB, MiB, prefault=False), SsdTier(engine_in(store_dir))],
        lambda: make_policy("lru"),
        StoreOptions(timeout_s=20.0),
    )
    yield s
    s.close()


def read(store: TieredStore, key: str) -> bytes | None:
    buf = np.zeros(PAGE, np.uint8)
    return bytes(buf[:32]) if store.get_batch_into([key], [parts(buf)])[0] else None


def on_ssd_only(store: TieredStore, keys: list[str]) -> str:
    """Write ``keys`` (generation 1) until some of them live on SSD alone; returns one of those."""
    for i in range(0, len(keys), 8):
        assert all(store.put_batch(keys[i : i + 8], [parts(page(k, 1)) for k in keys[i : i + 8]]))
    assert store.flush(30)
    dram, ssd = store.dram, store.ssd
    assert dram is not None and ssd is not None
    only = [k for k in keys if ssd.contains(k) and not dram.contains(k)]
    assert only, "no page was demoted to SSD"
    return only[0]


def served_anywhere(store: TieredStore, key: str) -> list[str]:
    """Which tiers hold ``key`` now (there must be none after the clear)."""
    return [t.name for t in store.tiers if t.contains(key)]


@pytest.mark.parametrize("hold", ["after_ssd_read", "before_dram_publish"])
def test_a_get_held_between_its_ssd_read_and_its_promotion_never_publishes_after_a_clear(
    store: TieredStore, store_dir: Path, hold: str
) -> None:
    keys = [f"g{i:03d}" for i in range(48)]
    victim = on_ssd_only(store, keys)
    ssd, dram = store.ssd, store.dram
    assert ssd is not None and dram is not None
    held, release = threading.Event(), threading.Event()
    tier: Any = ssd if hold == "after_ssd_read" else dram
    name = "get_batch_into" if hold == "after_ssd_read" else "put_batch"
    real = getattr(tier, name)

    def held_call(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "held-get" and not release.is_set():
            if hold == "after_ssd_read":
                got = real(*args, **kwargs)
                held.set()
                release.wait(HOLD_S)  # the bytes are read; nothing decided or published yet
                return got
            held.set()
            release.wait(HOLD_S)  # read and promotion decided; the DRAM publish is next
        return real(*args, **kwargs)

    setattr(tier, name, held_call)
    result: dict[str, Any] = {}

    def getter() -> None:
        buf = np.zeros(PAGE, np.uint8)
        result["ok"] = store.get_batch_into([victim], [parts(buf)])[0]
        result["bytes"] = bytes(buf[:32])

    t = threading.Thread(target=getter, name="held-get")
    t.start()
    assert held.wait(HOLD_S)
    store.clear()  # the operator's clear after a weight update
    release.set()
    t.join(HOLD_S)
    assert not t.is_alive()
    assert result["ok"]  # the get itself was served before the clear: that is fine
    delattr(tier, name)
    assert served_anywhere(store, victim) == []
    assert read(store, victim) is None
    assert store.stats()["placement"].get("promotions", 0) == 0
    # nothing reaches the new SSD epoch through a later demotion either
    for i in range(0, 48, 8):
        store.put_batch([f"n{i + j}" for j in range(8)], [parts(page(f"n{i + j}", 2)) for j in range(8)])
    assert store.flush(30)
    assert read(store, victim) is None
    store.close()
    with engine_in(store_dir) as engine:  # the restart finds the new epoch only
        assert not engine.contains(victim)


def test_a_demotion_pinned_before_a_clear_is_not_written_into_the_new_epoch(
    store: TieredStore, store_dir: Path
) -> None:
    ssd, mover = store.ssd, store.mover
    assert ssd is not None and mover is not None
    pinned, release = threading.Event(), threading.Event()
    real_put = ssd.put_batch

    def held_put(items: Any, deadline: float | None = None, epoch: int | None = None) -> list[bool]:
        if epoch is not None and not pinned.is_set():  # the first move (background or foreground)
            pinned.set()
            release.wait(HOLD_S)  # the DRAM bytes are pinned; the SSD write has not started
        return real_put(items, deadline, epoch=epoch)

    ssd.put_batch = held_put  # type: ignore[method-assign]
    keys = [f"d{i:03d}" for i in range(24)]  # more than DRAM's high watermark: demotions start

    clearing = threading.Event()
    before: list[str] = []  # pages whose set returned True before the clear started

    def setter() -> None:  # a demotion may run in the setter's thread (no free DRAM slot)
        for i in range(0, len(keys), 8):
            ok = store.put_batch(keys[i : i + 8], [parts(page(k, 1)) for k in keys[i : i + 8]])
            if not clearing.is_set():
                before.extend(k for k, good in zip(keys[i : i + 8], ok, strict=True) if good)

    t = threading.Thread(target=setter)
    t.start()
    assert pinned.wait(HOLD_S), "no demotion started"
    clearing.set()
    store.clear()
    release.set()
    t.join(HOLD_S)
    assert not t.is_alive()
    assert store.flush(30)
    del ssd.put_batch
    assert before
    stale = [k for k in before if read(store, k) is not None]
    assert stale == []
    assert ssd.stats()["rejected"]["stale_epoch"] > 0
    store.close()
    with engine_in(store_dir) as engine:
        assert [k for k in before if engine.contains(k)] == []


def test_a_served_reservation_filled_before_a_clear_is_not_published_after_it() -> None:
    dram = DramTier(MiB, MiB, prefault=False)
    try:
        (res,) = dram.reserve([("r", PAGE, 0)])
        assert res is not None
        res.body[:] = page("r", 1)
        dram.clear()
        assert dram.publish([res]) == [None]
        assert not dram.contains("r")
        assert dram.free_objects(PAGE) == dram.capacity_objects(PAGE)  # its slot was given back
        (res2,) = dram.reserve([("r", PAGE, 0)])
        assert res2 is not None and dram.publish([res2])[0] is not None  # after the clear: fine
    finally:
        dram.close()


def test_a_copy_taken_while_a_clear_runs_is_refused_until_the_clear_ends() -> None:
    dram = DramTier(MiB, MiB, prefault=False)
    try:
        dram.begin_clear()
        during = dram.generation
        assert dram.put_batch([("x", parts(page("x", 1)), make_ctx())], None, during) == [False]
        dram.end_clear()
        assert dram.put_batch([("x", parts(page("x", 1)), make_ctx())], None, during) == [False]
        now = dram.generation
        assert dram.put_batch([("x", parts(page("x", 2)), make_ctx())], None, now) == [True]
        assert dram.free_objects(PAGE) == dram.capacity_objects(PAGE) - 1  # refused copies freed
    finally:
        dram.close()


def test_an_ssd_write_for_an_epoch_a_clear_ended_is_never_indexed(store_dir: Path) -> None:
    with engine_in(store_dir) as engine:
        before = engine.epoch
        assert engine.clear(None)
        assert engine.put_batch([("s", parts(page("s", 1)))], None, epoch=before) == [False]
        assert not engine.contains("s")
        assert engine.stats()["rejected"]["stale_epoch"] == 1
        assert engine.put_batch([("s", parts(page("s", 2)))], None, epoch=engine.epoch) == [True]


def make_ctx() -> Any:
    from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT

    return DEFAULT_CONTEXT._replace(size=PAGE)
