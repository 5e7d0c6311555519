"""Durable clear (epoch) and the I/O mode choice."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from ssd_helpers import check_get, open_engine, value_for

from hicache_mooncake.ssd import SsdDirectIoError
from hicache_mooncake.ssd import io as io_mod
from hicache_mooncake.ssd.io import probe_direct_io


@pytest.mark.parametrize("mode", ["on", "off"])
def test_cleared_data_does_not_return_after_restart(ssd_dir: str, mode: str) -> None:
    with open_engine(ssd_dir, direct_io=mode) as e:
        for i in range(30):
            assert e.put(f"old{i}", [memoryview(value_for(f"old{i}", 50_000))])
        e.clear()
        assert e.stats()["entries"] == 0 and not e.contains("old0")
        assert not check_get(e, "old0", 50_000)
        assert e.put("new", [memoryview(value_for("new", 70_000))])
    with open_engine(ssd_dir, direct_io=mode) as e:
        st = e.stats()
        assert st["entries"] == 1 and st["recover_corrupt"] == 0 and st["recover_torn"] == 0
        assert check_get(e, "new", 70_000)
        assert all(not e.contains(f"old{i}") for i in range(30))
        e.clear()
    with open_engine(ssd_dir, direct_io=mode) as e:
        assert e.stats()["entries"] == 0 and e.stats()["epoch"] == 2
        # the old regions are reused with the new epoch
        for i in range(60):
            assert e.put(f"n{i}", [memoryview(value_for(f"n{i}", 200_000))])
    with open_engine(ssd_dir, direct_io=mode) as e:
        assert sum(check_get(e, f"n{i}", 200_000) for i in range(60)) >= 40
        assert all(not e.contains(f"old{i}") for i in range(30))


def test_clear_without_close_then_kill_like_reopen(ssd_dir: str) -> None:
    """clear() is durable on its own: reopen without a clean close (fds just dropped)."""
    e = open_engine(ssd_dir)
    for i in range(10):
        assert e.put(f"c{i}", [memoryview(value_for(f"c{i}", 10_000))])
    e.clear()
    # simulate a crash: release the lock files without closing regions cleanly
    for fd in e._lock_fds:
        os.close(fd)
    e._lock_fds = []
    with open_engine(ssd_dir) as e2:
        assert e2.stats()["entries"] == 0
    e.close()


def test_io_mode_is_probed_and_reported(ssd_dir: str, small_tmpfs: str) -> None:
    expected, why = probe_direct_io(ssd_dir)
    with open_engine(ssd_dir) as e:
        st = e.stats()
        assert st["io_mode"] == ("direct" if expected else "buffered")
        assert st["io_mode_reason"]
    # tmpfs: older kernels refuse O_DIRECT (-> buffered); since 6.6 tmpfs accepts it. Either way
    # the engine's choice must match what the filesystem does and round trips must work.
    t_ok, t_why = probe_direct_io(small_tmpfs)
    with open_engine(os.path.join(small_tmpfs, "e"), capacity_bytes=4 << 20) as e:
        assert e.stats()["io_mode"] == ("direct" if t_ok else "buffered"), t_why
        assert e.put("t", [memoryview(value_for("t", 9999))]) and check_get(e, "t", 9999)


def test_refused_direct_io_falls_back_or_errors(ssd_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        io_mod, "probe_direct_io", lambda d: (False, "open(O_DIRECT) failed: Invalid argument")
    )
    with open_engine(ssd_dir, direct_io="auto") as e:
        st = e.stats()
        assert st["io_mode"] == "buffered" and "Invalid argument" in st["io_mode_reason"]
        assert e.put("b", [memoryview(value_for("b", 5000))]) and check_get(e, "b", 5000)
    with pytest.raises(SsdDirectIoError):
        open_engine(ssd_dir, direct_io="on")
    with open_engine(ssd_dir, direct_io="off") as e:
        assert e.stats()["io_mode"] == "buffered" and check_get(e, "b", 5000)


def test_region_size_change_discards_old_regions(ssd_dir: str) -> None:
    with open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20) as e:
        assert e.put("a", [memoryview(np.ones(100, np.uint8))])
    with open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=2 << 20) as e:
        assert e.stats()["entries"] == 0
        assert e.put("b", [memoryview(value_for("b", 100))]) and check_get(e, "b", 100)


def _fill(path: str) -> None:
    """Fill the filesystem of ``path`` to the last byte, like another program would."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    chunk = b"\xab" * (64 << 10)
    try:
        while True:
            os.write(fd, chunk)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    try:  # the last partial blocks
        while True:
            os.write(fd, b"\xab" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_clear_is_durable_on_a_full_disk(small_tmpfs: str) -> None:
    """The epoch is written in place into space reserved at open: a full filesystem cannot
    refuse it, so no cleared page comes back after a restart, and pages written after the clear
    (into regions already allocated) survive it."""
    d = os.path.join(small_tmpfs, "ssd")
    opts = {"capacity_bytes": 32 << 20, "region_size": 1 << 20, "direct_io": "off"}
    with open_engine(d, **opts) as e:
        for i in range(12):
            assert e.put(f"old{i}", [memoryview(value_for(f"old{i}", 200_000))])
        _fill(os.path.join(small_tmpfs, "hog"))
        assert e.clear() is True
        assert e.stats().get("clear_errors", 0) == 0
        for i in range(6):
            assert e.put(f"new{i}", [memoryview(value_for(f"new{i}", 200_000))])
    with open_engine(d, **opts) as e:
        assert all(not e.contains(f"old{i}") for i in range(12))
        assert all(check_get(e, f"new{i}", 200_000) for i in range(6))
        assert e.stats()["epoch"] == 1


def test_a_failed_epoch_write_fails_closed_and_loud(
    ssd_dir: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If the epoch still cannot be written (a dying disk), the cleared pages are never served
    again: not now (the engine refuses every call) and not after a restart (the old region files
    are gone)."""
    from hicache_mooncake.ssd.state import StateFile

    e = open_engine(ssd_dir)
    for i in range(8):
        assert e.put(f"o{i}", [memoryview(value_for(f"o{i}", 100_000))])

    def dying(self, state, durable=True):  # type: ignore[no-untyped-def]
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(StateFile, "write", dying)
    assert e.clear() is False
    monkeypatch.undo()
    st = e.stats()
    assert st["refusing"].startswith("clear failed") and st["clear_errors"] == 1
    assert any(r.levelname == "ERROR" and "clear could not write" in r.message for r in caplog.records)
    assert not e.contains("o0") and not check_get(e, "o0", 100_000)
    assert e.put("n", [memoryview(value_for("n", 1000))]) is False
    e.close()
    with open_engine(ssd_dir) as e2:  # a restart does not undo the failed clear: still refused
        assert all(not e2.contains(f"o{i}") for i in range(8))
        assert e2.put("n", [memoryview(value_for("n", 1000))]) is False
    from hicache_mooncake.ssd.clear_record import main as repair_main

    assert repair_main(["--repair", ssd_dir]) == 0  # the operator's action the log names
    with open_engine(ssd_dir) as e3:
        assert all(not e3.contains(f"o{i}") for i in range(8))
        assert e3.put("n", [memoryview(value_for("n", 1000))]) and check_get(e3, "n", 1000)


def test_state_file_slots_survive_a_torn_write(ssd_dir: str) -> None:
    from hicache_mooncake.ssd.state import STATE_NAME, read_state

    with open_engine(ssd_dir) as e:
        assert e.clear() and e.clear()
    before = read_state(ssd_dir)
    assert before is not None and before.epoch == 2
    path = os.path.join(ssd_dir, STATE_NAME)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # tear the newest slot
        f.seek((before.counter % 2) * (size // 2) + 40)
        f.write(b"\xff" * 8)
    after = read_state(ssd_dir)
    assert after is not None and after.counter == before.counter - 1
