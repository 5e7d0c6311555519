"""A stalled disk never stalls the caller: every call returns by its deadline, work not done in
time is a miss / False, the tier is degraded (skipped) until a health probe passes, and late I/O
never touches the caller's memory. Runs on a real frozen ext4 loop mount (root) and, where the
stalled I/O is Python's own (a clear, region files, the I/O threads), on a syscall-level stall
(any user): the native workers' reads and writes are stalled by the real frozen disk only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from ssd_helpers import aligned_array, value_for

from hicache_mooncake.ssd import SsdEngine, SsdInUseError, SsdOptions
from hicache_mooncake.tiers.ssd_tier import SsdTier

PAGE = 64 << 10
TIMEOUT = 1.0
SLACK = 2.5  # generous: a shared, noisy machine


def _engine(path: str, **kw: Any) -> SsdEngine:
    opts: dict[str, Any] = {
        "dirs": (os.path.join(path, "ssd"),),
        "capacity_bytes": 8 << 20,
        "region_size": 1 << 20,
        "probe_timeout_s": 0.5,
        "probe_interval_s": 0.2,
    }
    opts.update(kw)
    engine = SsdEngine(SsdOptions(**opts))
    assert engine.wait_recovered(60)
    return engine


def _page(key: str) -> np.ndarray:
    arr = aligned_array(PAGE)
    arr[:] = value_for(key, PAGE)
    return arr


def _items(keys: list[str]) -> list[tuple[str, list[memoryview], Any]]:
    from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT

    return [(k, [memoryview(_page(k))], DEFAULT_CONTEXT) for k in keys]


def _wait(cond: Any, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def _get(
    tier: SsdTier, keys: list[str], deadline: float | None = None
) -> tuple[list[bool], list[np.ndarray]]:
    from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT

    outs = [aligned_array(PAGE) for _ in keys]
    for o in outs:
        o[:] = 0xAB
    res = tier.get_batch_into(
        [(k, [memoryview(o)], DEFAULT_CONTEXT) for k, o in zip(keys, outs, strict=True)], deadline=deadline
    )
    return res, outs


@pytest.mark.parametrize("stalling_disk", ["fsfreeze"], indirect=True)  # native I/O: a real stall
def test_put_and_get_return_by_their_deadline_then_the_tier_recovers(stalling_disk: Any) -> None:
    tier = SsdTier(_engine(stalling_disk.path, direct_io="auto"), timeout_s=TIMEOUT)
    old = [f"old{i}" for i in range(4)]
    assert all(tier.put_batch(_items(old)))
    stalling_disk.freeze()
    try:
        t0 = time.monotonic()
        assert tier.put_batch(_items(["new0", "new1"]), deadline=t0 + TIMEOUT) == [False, False]
        assert time.monotonic() - t0 < TIMEOUT + SLACK
        st = tier.stats()
        assert st["degraded"] and "deadline" in st["degraded_reason"]
        # degraded: skipped at once, whatever the deadline
        t0 = time.monotonic()
        res, _ = _get(tier, old, deadline=t0 + 30)
        assert res == [False] * 4 and not tier.contains(old[0])
        assert tier.put_batch(_items(["new2"])) == [False]
        assert time.monotonic() - t0 < 0.5
        time.sleep(1.0)  # probes run against the stalled disk and fail
        assert tier.stats()["degraded"]
    finally:
        stalling_disk.thaw()
    assert _wait(lambda: not tier.stats()["degraded"]), "the health probe never passed after the thaw"
    res, outs = _get(tier, old)
    assert res == [True] * 4
    assert all(np.array_equal(o, value_for(k, PAGE)) for k, o in zip(old, outs, strict=True))
    assert tier.put_batch(_items(["new3"])) == [True]
    st = tier.stats()
    assert st["degraded_episodes"] == 1 and st["skipped_gets"] >= 4
    tier.close()


@pytest.mark.parametrize("stalling_disk", ["fsfreeze"], indirect=True)
def test_a_read_that_completes_late_never_writes_into_the_callers_memory(stalling_disk: Any) -> None:
    """On the real stalled disk only: gets read on the native I/O workers, whose syscalls the
    Python-level stall cannot hold."""
    # O_DIRECT (where the filesystem takes it) so reads really go to the stalled device
    tier = SsdTier(_engine(stalling_disk.path, direct_io="auto"), timeout_s=TIMEOUT)
    keys = [f"r{i}" for i in range(3)]
    assert all(tier.put_batch(_items(keys)))
    tier.engine.sync()
    stalling_disk.freeze()
    try:
        t0 = time.monotonic()
        res, outs = _get(tier, keys, deadline=t0 + 0.5)
        assert time.monotonic() - t0 < 0.5 + SLACK
        assert res == [False] * 3
    finally:
        stalling_disk.thaw()
    # the stalled reads complete now, into engine memory; the caller's buffers stay untouched
    assert _wait(lambda: tier.engine.stats().get("reads", 0) >= 3 or tier.engine.stats()["degraded"] is False)
    time.sleep(0.5)
    assert all((o == 0xAB).all() for o in outs), "a late read wrote into memory the caller had back"
    tier.close()


@pytest.mark.parametrize("stalling_disk", ["fsfreeze"], indirect=True)  # native I/O: a real stall
def test_close_returns_by_its_deadline_and_releases_the_directory_after_the_thaw(stalling_disk: Any) -> None:
    eng = _engine(stalling_disk.path)
    tier = SsdTier(eng, timeout_s=TIMEOUT)
    assert all(tier.put_batch(_items(["c0", "c1"])))
    stalling_disk.freeze()
    try:
        t0 = time.monotonic()
        assert tier.put_batch(_items(["c2"]), deadline=t0 + 0.5) == [False]
        t0 = time.monotonic()
        tier.close()  # io timeout: 1 s
        assert time.monotonic() - t0 < TIMEOUT + SLACK
    finally:
        stalling_disk.thaw()

    def reopens() -> bool:
        try:
            _engine(stalling_disk.path).close()
            return True
        except SsdInUseError:
            return False

    assert _wait(reopens), "the directory lock was never released"
    with _engine(stalling_disk.path) as e:
        # c2 was refused, but its write landed after the thaw with intact bytes: it may be
        # recovered (with the right bytes) or not; never wrong bytes
        for k in ("c0", "c1", "c2"):
            out = aligned_array(PAGE)
            ok = e.get_into(k, [memoryview(out)])
            assert ok or k == "c2"
            assert not ok or np.array_equal(out, value_for(k, PAGE))


def test_clear_on_a_stalled_disk_returns_in_time_and_fails_closed(stalling_disk: Any) -> None:
    eng = _engine(stalling_disk.path)
    assert all(eng.put_batch([(k, [memoryview(_page(k))]) for k in ("a", "b")]))
    stalling_disk.freeze()
    try:
        t0 = time.monotonic()
        assert eng.clear(deadline=t0 + TIMEOUT) is False
        assert time.monotonic() - t0 < TIMEOUT + SLACK
        # nothing cleared is served, nothing is written, until the new epoch is on disk
        assert not eng.contains("a") and eng.stats()["refusing"]
        assert eng.put("c", [memoryview(_page("c"))], deadline=time.monotonic() + 1) is False
    finally:
        stalling_disk.thaw()
    assert _wait(lambda: not eng.stats()["refusing"] and not eng.stats()["degraded"])
    assert eng.put("d", [memoryview(_page("d"))])
    eng.close()
    with _engine(stalling_disk.path) as e:
        assert not e.contains("a") and not e.contains("b") and e.contains("d")


@pytest.mark.parametrize("stalling_disk", ["fsfreeze"], indirect=True)  # native I/O: a real stall
def test_a_late_write_from_reused_caller_memory_is_never_served(stalling_disk: Any) -> None:
    """Zero-copy put: the write reads the caller's memory. If it completes after the put gave up
    and the caller already reused that memory, the checksum taken before the write no longer
    matches: never indexed now, and a miss (not wrong bytes) after a restart."""
    eng = _engine(stalling_disk.path, direct_io="off", verify_on_recover=False)
    assert eng.put("warm", [memoryview(_page("warm"))])  # the region is open: the stall hits the write
    page = _page("late")
    stalling_disk.freeze()
    try:
        assert eng.put("late", [memoryview(page)], deadline=time.monotonic() + 0.5) is False
        page[:] = 7  # SGLang reuses its host memory
    finally:
        stalling_disk.thaw()
    assert _wait(lambda: eng.stats().get("late_writes", 0) >= 1)
    assert not eng.contains("late")
    eng.close()
    for verify in (False, True):
        with _engine(stalling_disk.path, direct_io="off", verify_on_recover=verify) as e:
            out = aligned_array(PAGE)
            if e.get_into("late", [memoryview(out)]):
                assert np.array_equal(out, value_for("late", PAGE)), "wrong bytes served"


def test_the_interpreter_exits_while_io_threads_are_stuck(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The engine's threads are daemons: a process whose disk stalls still exits (syscall-level
    stall of the engine's Python I/O; native workers are detached threads. A thread stuck in the
    kernel on a really frozen disk delays exit until the thaw, by design of the kernel)."""
    code = f"""
import os, sys, time
sys.path.insert(0, {os.path.dirname(__file__)!r})
from stall import SyscallStall
from hicache_mooncake.ssd import SsdEngine, SsdOptions
d = {str(tmp_path / "x")!r}
stall = SyscallStall(d)
stall.install()
e = SsdEngine(SsdOptions(dirs=(d,), capacity_bytes=4 << 20, region_size=1 << 20, direct_io="off"))
stall.freeze()
# an epoch bump is Python I/O on the engine's threads: it stalls, the call returns by its deadline
assert e.clear(deadline=time.monotonic() + 0.3) is False
print("returned", flush=True)
"""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "returned" in r.stdout and time.monotonic() - t0 < 30
