"""``clear_tenant`` is a barrier for that tenant's pages (issue 48 follow-ups, item 2): an
operation that took one of its pages before the tenant clear never publishes it after the clear.

Each test holds a real operation between taking the page and publishing it (a hook around the
real tier call, released by an event), runs a real ``clear_tenant`` meanwhile, lets the operation
finish, and checks that no tier serves the tenant's old page (after a restart of the SSD engine
too), while the other tenant's pages are untouched."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier, Reservation
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.policy.contexts import set_contexts
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAGE = 64 << 10
MiB = 1 << 20
HOLD_S = 10.0


def tenant(key: str) -> str:
    return key.split("/", 1)[0]


def parts(key: str) -> list[memoryview]:
    return [memoryview(np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8))]


def engine_in(d: Path) -> SsdEngine:
    engine = SsdEngine(SsdOptions(dirs=(str(d),), capacity_bytes=16 * MiB, region_size=MiB, direct_io="off"))
    assert engine.wait_recovered(60)
    return engine


def reserve(store: TieredStore, key: str) -> Reservation:
    (ctx,) = set_contexts([key], 0, None, [PAGE])
    (res,) = store.served.reserve_batch([key], [ctx])
    assert isinstance(res, Reservation)
    res.body[:] = np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8)
    return res


def test_a_served_reservation_made_before_a_tenant_clear_is_not_published_after_it() -> None:
    store = TieredStore(
        [DramTier(4 * MiB, MiB, prefault=False)],
        lambda: make_policy("lru"),
        StoreOptions(timeout_s=5.0),
        tenant_of=tenant,
    )
    try:
        reserved = [reserve(store, k) for k in ("a/k0", "b/k0")]
        store.clear_tenant("a")  # while the client still copies its bytes in
        ctxs = set_contexts(["a/k0", "b/k0"], 0, None, [PAGE, PAGE])
        assert store.served.commit_batch(reserved, ctxs) == [False, True]
        dram = store.dram
        assert dram is not None
        assert dram.contains_batch(["a/k0", "b/k0"]) == [False, True]
        assert store.counts["commits_refused_tenant_clear"] == 1
        assert dram.free_objects(PAGE) == dram.capacity_objects(PAGE) - 1  # its slot was given back
        later = reserve(store, "a/k1")  # reserved after the clear: published as usual
        assert store.served.commit_batch([later], set_contexts(["a/k1"], 0, None, [PAGE])) == [True]
        assert dram.contains("a/k1")
    finally:
        store.close()


@pytest.fixture
def ssd_store(tmp_path: Path) -> Iterator[tuple[TieredStore, Path]]:
    d = tmp_path / "ssd"
    d.mkdir()
    store = TieredStore(
        [DramTier(MiB, MiB, prefault=False), SsdTier(engine_in(d))],
        lambda: make_policy("lru"),
        StoreOptions(timeout_s=20.0, wait_for_room=False),  # demotions run in the mover's thread
        tenant_of=tenant,
    )
    yield store, d
    store.close()


def test_a_demotion_pinned_before_a_tenant_clear_is_not_left_on_ssd(
    ssd_store: tuple[TieredStore, Path],
) -> None:
    store, d = ssd_store
    ssd, mover = store.ssd, store.mover
    assert ssd is not None and mover is not None
    pinned, release, paused = threading.Event(), threading.Event(), threading.Event()
    real_put, real_pause = ssd.put_batch, mover.pause

    def held_put(items: Any, deadline: float | None = None, epoch: int | None = None) -> list[bool]:
        if epoch is not None and not pinned.is_set():  # the mover's first move
            pinned.set()
            release.wait(HOLD_S)  # the DRAM bytes are pinned; the SSD write has not started
        return real_put(items, deadline, epoch=epoch)

    def noted_pause() -> None:
        paused.set()
        real_pause()

    ssd.put_batch = held_put  # type: ignore[method-assign]
    mover.pause = noted_pause  # type: ignore[method-assign]
    keys = [f"a/{i:03d}" for i in range(24)]  # more than DRAM's high watermark: demotions start
    for i in range(0, len(keys), 4):
        store.put_batch(keys[i : i + 4], [parts(k) for k in keys[i : i + 4]])
    assert pinned.wait(HOLD_S), "no demotion started"
    clearing = threading.Thread(target=store.clear_tenant, args=("a",), kwargs={"timeout_s": 30.0})
    clearing.start()
    while not paused.is_set() and clearing.is_alive():  # the clear waits for the move in flight
        time.sleep(0.01)
    release.set()
    clearing.join(HOLD_S)
    assert not clearing.is_alive()
    assert store.flush(30)
    del ssd.put_batch, mover.pause
    assert [k for k in keys if ssd.engine.contains(k)] == []  # nothing of tenant a on SSD
    assert store.dram is not None and [k for k in keys if store.dram.contains(k)] == []
    buf = np.zeros(PAGE, np.uint8)
    assert not any(store.get_batch_into([k], [[memoryview(buf)]])[0] for k in keys)
    assert store.put_batch(["b/0"], [parts("b/0")]) == [True]  # the store goes on
    store.close()
    with engine_in(d) as engine:  # the restart finds none of them either
        assert [k for k in keys if engine.contains(k)] == []


def test_a_commit_while_its_tenant_is_cleared_is_refused() -> None:
    store = TieredStore(
        [DramTier(4 * MiB, MiB, prefault=False)],
        lambda: make_policy("lru"),
        StoreOptions(timeout_s=5.0),
        tenant_of=tenant,
    )
    dram = store.dram
    assert dram is not None
    try:
        assert store.put_batch(["b/old"], [parts("b/old")]) == [True]
        reserved = [reserve(store, k) for k in ("a/k0", "b/k0")]  # before the clear of tenant a
        held, release = threading.Event(), threading.Event()
        real_get = dram.get_batch_into

        def held_get(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == "held-get" and not release.is_set():
                held.set()
                release.wait(HOLD_S)  # a data call in flight: the tenant clear waits for it
            return real_get(*args, **kwargs)

        dram.get_batch_into = held_get  # type: ignore[method-assign]
        buf = np.zeros(PAGE, np.uint8)
        getter = threading.Thread(
            target=store.get_batch_into, args=(["b/old"], [[memoryview(buf)]]), name="held-get"
        )
        getter.start()
        assert held.wait(HOLD_S)
        clearing = threading.Thread(target=store.clear_tenant, args=("a",))
        clearing.start()
        while "a" not in store.clearing:
            time.sleep(0.005)
        ctxs = set_contexts(["a/k0", "b/k0"], 0, None, [PAGE, PAGE])
        assert store.served.commit_batch(reserved, ctxs) == [False, True]  # during the clear
        assert store.served.reserve_batch(["a/k1"], ctxs[:1])[0] is False  # a new one: refused
        release.set()
        getter.join(HOLD_S)
        clearing.join(HOLD_S)
        assert not getter.is_alive() and not clearing.is_alive()
        del dram.get_batch_into
        assert dram.contains_batch(["a/k0", "b/k0", "b/old"]) == [False, True, True]
    finally:
        store.close()
