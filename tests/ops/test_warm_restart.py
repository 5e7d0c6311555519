"""Warm restart: the snapshot of what is hot is written at close (atomically, bounded, in the SSD
directory), used after a restart only when it matches the store (else refused with the reason,
and the store starts cold), and a warm start brings the hot pages back into DRAM in the background
while the store serves."""

from __future__ import annotations

import os
import time

import numpy as np
from ops_helpers import small_config
from store_load import StoreLoad, parts

from hicache_mooncake.store_builder import build_store
from hicache_mooncake.tiers.warm_snapshot import SNAPSHOT_NAME, decode

MiB = 1 << 20


def hot_store(tmp_path, **overrides):  # type: ignore[no-untyped-def]
    config = small_config(tmp_path, **overrides)
    store = build_store(config, "rank0")
    load = StoreLoad(store, threads=2, requests=40)
    with load:
        load.wait_ops(900)
    load.assert_clean()
    return config, store, load


def test_a_restart_starts_warm_from_the_snapshot(tmp_path):
    config, store, load = hot_store(tmp_path)
    assert store.flush(30)  # the load stopped; let the mover finish its demotions first
    hot = set(store.dram.keys())
    resident = store.stats()["placement"]["resident"]
    store.close(flush_timeout_s=10)
    snap = tmp_path / "ssd" / "rank0" / SNAPSHOT_NAME
    written = decode(snap.read_bytes())
    assert len(written) >= resident * 0.9 and sum(written.in_dram) >= len(hot) * 0.9

    again = build_store(config, "rank0")
    try:
        assert again.warm.restore_done(30)  # adopted in the background (attach does not wait)
        restore = again.warm.last_restore
        assert restore["snapshot"] == "used" and restore["adopted"] >= resident * 0.9
        assert again.stats()["placement"]["resident"] == restore["adopted"]  # the policy knows them
        assert again.warm.rewarm_done(30)
        back = set(again.dram.keys())
        assert len(back & hot) >= 0.8 * min(
            len(hot), again.stats()["placement"]["dram_capacity"] // (16 << 10)
        )
        # what came back is served from DRAM, byte for byte
        keys = sorted(back & hot)[:16]
        bufs = [np.zeros(load.size, np.uint8) for _ in keys]
        hits_before = again.stats()["dram"]["hits"]
        assert all(again.get_batch_into(keys, [parts(b) for b in bufs]))
        assert all(np.array_equal(b, load.content(k)) for k, b in zip(keys, bufs, strict=True))
        assert again.stats()["dram"]["hits"] - hits_before == len(keys)
    finally:
        again.close()


def test_attach_does_not_wait_for_the_adoption_and_serves_meanwhile(tmp_path, monkeypatch):
    """The snapshot's pages are adopted on the re-warm thread: the store is built and serves
    (byte-exact, from SSD) while the adoption is held; a page served meanwhile is placed by that
    call and the adoption leaves it alone; no snapshot is written over the one being adopted."""
    import threading

    from hicache_mooncake.tiers import rewarm
    from hicache_mooncake.tiers.store_state import StoreState

    config, store, load = hot_store(tmp_path)
    assert store.flush(30)
    keys = sorted(store.ssd.engine.keys())[:8]
    store.close(flush_timeout_s=10)
    snap = tmp_path / "ssd" / "rank0" / SNAPSHOT_NAME
    written = snap.read_bytes()

    release, entered = threading.Event(), threading.Event()
    real_apply = StoreState.apply

    def held_apply(self, drops, demote):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "hicache-rewarm":  # after a chunk, lock released
            entered.set()
            assert release.wait(60)
        return real_apply(self, drops, demote)

    monkeypatch.setattr(rewarm, "_CHUNK", 4)
    monkeypatch.setattr(StoreState, "apply", held_apply)
    again = build_store(config, "rank0")  # returns although the adoption is held
    try:
        assert entered.wait(30) and not again.warm.restore_done(0)
        assert again.warm.stats()["adopting"] is True
        bufs = [np.zeros(load.size, np.uint8) for _ in keys]
        assert all(again.get_batch_into(keys, [parts(b) for b in bufs]))  # served meanwhile
        assert all(np.array_equal(b, load.content(k)) for k, b in zip(keys, bufs, strict=True))
        assert again.warm.save() == 0 and snap.read_bytes() == written  # the snapshot is kept
        release.set()
        assert again.warm.restore_done(30)
        assert again.warm.last_restore["adopted"] > 0 and again.warm.stats()["adopting"] is False
        assert again.stats()["placement"]["resident"] >= again.warm.last_restore["adopted"]
        assert all(again.placement is not None and k in again.placement for k in keys)
    finally:
        release.set()
        again.close()


def test_without_warm_restart_dram_starts_empty(tmp_path):
    config, store, _load = hot_store(tmp_path, tiers={"warm": {"enabled": False}})
    store.close(flush_timeout_s=10)
    assert not (tmp_path / "ssd" / "rank0" / SNAPSHOT_NAME).exists()
    again = build_store(config, "rank0")
    try:
        assert again.warm is None and again.dram.keys() == []
    finally:
        again.close()


def test_a_snapshot_of_another_epoch_is_refused_and_the_store_starts_cold(tmp_path, printed_lines):
    config, store, _load = hot_store(tmp_path)
    store.close(flush_timeout_s=10)
    cleared = build_store(config, "rank0")
    cleared.clear()  # a new epoch: the snapshot's pages are gone (and nothing new is hot)
    cleared.close()
    again = build_store(config, "rank0")
    try:
        assert again.warm.restore_done(30)
        why = again.warm.last_restore["snapshot"]
        assert why.startswith("written for epoch")
        assert again.stats()["placement"]["resident"] == 0 and again.dram.keys() == []
        assert printed_lines.matching("not used (written for epoch")
    finally:
        again.close()


def test_a_corrupt_snapshot_is_refused(tmp_path):
    config, store, _load = hot_store(tmp_path)
    store.close(flush_timeout_s=10)
    snap = tmp_path / "ssd" / "rank0" / SNAPSHOT_NAME
    raw = bytearray(snap.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    snap.write_bytes(bytes(raw))
    again = build_store(config, "rank0")
    try:
        assert again.warm.restore_done(30)
        assert again.warm.last_restore["snapshot"] == "checksum mismatch (torn or corrupt file)"
        assert again.dram.keys() == []
    finally:
        again.close()


def test_the_snapshot_is_bounded_and_replaced_atomically(tmp_path):
    config, store, _load = hot_store(tmp_path, tiers={"warm": {"max_entries": 50}})
    assert store.warm.save() == 50
    directory = tmp_path / "ssd" / "rank0"
    assert len(decode((directory / SNAPSHOT_NAME).read_bytes())) == 50
    assert not [n for n in os.listdir(directory) if n.endswith(".tmp")]
    store.close()


def test_snapshots_are_taken_at_intervals(tmp_path):
    config, store, _load = hot_store(tmp_path, tiers={"warm": {"interval_s": 0.2}})
    try:
        before = store.warm.counts["snapshots"]
        load = StoreLoad(store, threads=1, requests=20)
        with load:
            load.wait_ops(300)
            end = time.monotonic() + 10
            while store.warm.counts["snapshots"] <= before and time.monotonic() < end:
                time.sleep(0.05)
        assert store.warm.counts["snapshots"] > before
    finally:
        store.close()


def test_a_snapshot_write_on_a_stalled_disk_gives_up_at_the_io_deadline(tmp_path):
    """The snapshot is written at close and detach: on a disk that stalls, the write is given up
    at io.timeout_s (the previous snapshot stays), a second one is not started while the first is
    stuck (never two writers on one file), and snapshots are written again once the disk is back."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ssd"))
    from stall import SyscallStall  # tests/ssd/stall.py

    _config, store, _load = hot_store(tmp_path, io={"timeout_s": 0.5})
    assert store.flush(30)
    stall = SyscallStall(str(tmp_path / "ssd"))
    stall.install()
    try:
        stall.freeze()
        t0 = time.monotonic()
        assert store.warm.save() == 0
        assert time.monotonic() - t0 < 0.5 + 1.5
        assert store.warm.counts["snapshot_timeouts"] == 1
        assert store.warm.save() == 0 and store.warm.counts["snapshots_skipped_busy"] == 1
        stall.thaw()
        end = time.monotonic() + 20
        while (written := store.warm.save()) == 0 and time.monotonic() < end:
            time.sleep(0.05)
        assert written > 0
        snap = tmp_path / "ssd" / "rank0" / SNAPSHOT_NAME
        assert len(decode(snap.read_bytes())) == written
    finally:
        stall.thaw()
        stall.uninstall()
        store.close()
