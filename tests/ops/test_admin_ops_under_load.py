"""Every admin operation, through the admin endpoint (real HTTP on loopback, token required), while
four threads keep calling the store the way SGLang does and check every byte they read: resize
DRAM and SSD both ways, detach SSD and DRAM (drain and drop), attach an SSD tier the store did not
start with, freeze / unfreeze, clear one tenant."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ops_helpers import finished, small_config
from store_load import StoreLoad, parts

from hicache_mooncake.keys import tenant_of_key
from hicache_mooncake.ssd.format import parse_region_file_name
from hicache_mooncake.tiers.warm_snapshot import SNAPSHOT_NAME

MiB = 1 << 20
pytestmark = pytest.mark.integration


def region_files(directory: Path) -> int:
    return sum(1 for name in os.listdir(directory) if parse_region_file_name(name) is not None)


def test_resize_dram_down_and_up_under_load(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store) as load:
        load.wait_ops(600)
        op = finished(admin, admin.resize("dram", "2MiB"))
        assert op["complete"] and op["progress"]["capacity"] == 2 * MiB
        dram = store.stats()["dram"]
        assert dram["capacity_bytes"] == 2 * MiB and dram["retired_slabs_in_use"] == 0
        assert dram["used_bytes"] <= 2 * MiB
        assert store.stats()["placement"]["dram_capacity"] <= 2 * MiB
        load.wait_ops(600)
        op = finished(admin, admin.resize("dram", 6 * MiB))
        assert op["complete"] and store.stats()["dram"]["capacity_bytes"] == 6 * MiB
        load.wait_ops(600)
    load.assert_clean()
    assert admin.show()["tiers"][0]["capacity_bytes"] == 6 * MiB


def test_resize_dram_past_max_capacity_is_refused_and_changes_nothing(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    op = admin.wait(admin.resize("dram", "16MiB"), 30)
    assert op["state"] == "failed" and "1 to 8 slabs" in op["error"]
    assert store.stats()["dram"]["capacity_bytes"] == 4 * MiB


def test_resize_ssd_down_and_up_under_load(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    ssd_dir = tmp_path / "ssd" / "rank0"
    with StoreLoad(store, requests=300) as load:
        load.wait_ops(1500)  # more pages than DRAM + SSD hold: the SSD is full
        assert region_files(ssd_dir) > 8
        op = finished(admin, admin.resize("ssd", "8MiB"))
        assert op["complete"], op
        assert store.ssd.engine.capacity_bytes == 8 * MiB
        assert region_files(ssd_dir) <= 8  # the disk space past the new size is given back
        load.wait_ops(900)
        assert region_files(ssd_dir) <= 8  # and not taken again
        op = finished(admin, admin.resize("ssd", "24MiB"))
        assert op["complete"] and store.ssd.engine.capacity_bytes == 24 * MiB
        load.wait_ops(900)
    load.assert_clean()
    assert store.stats()["placement"]["forgotten"] >= 0


def test_detach_ssd_drain_under_load_leaves_a_snapshot_and_dram_serving(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store) as load:
        load.wait_ops(900)
        op = finished(admin, admin.detach("ssd", "drain"))
        assert op["complete"] and op["progress"]["tiers"] == ["dram"]
        assert op["progress"]["snapshot_entries"] > 0
        assert store.ssd is None and store.mover is None
        before = load.stats.counts["read"]
        load.wait_ops(900)
        assert load.stats.counts["read"] > before  # DRAM alone keeps serving
    load.assert_clean()
    assert (tmp_path / "ssd" / "rank0" / SNAPSHOT_NAME).exists()
    placement = store.stats()["placement"]
    assert placement["resident"] == placement["in_dram"]  # nothing is believed to be on an SSD


def test_detach_ssd_drop_under_load(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store) as load:
        load.wait_ops(900)
        op = finished(admin, admin.detach("ssd", "drop"))
        assert op["complete"] and [t["name"] for t in admin.show()["tiers"]] == ["dram"]
        load.wait_ops(600)
    load.assert_clean()
    placement = store.stats()["placement"]
    assert placement["resident"] == placement["in_dram"]


@pytest.mark.parametrize("mode", ["drain", "drop"])
def test_detach_dram_under_load(tmp_path, stores, admin_for, mode):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store) as load:
        load.wait_ops(900)
        in_dram = store.stats()["dram"]["entries"]
        op = finished(admin, admin.detach("dram", mode))
        assert op["complete"] and op["progress"]["tiers"] == ["ssd"]
        if mode == "drain":  # the DRAM pages went down to SSD before the tier went
            assert in_dram > 0 and op["progress"]["pages_moved_down"] >= in_dram // 2
        before = load.stats.counts["read"]
        load.wait_ops(900)
        assert load.stats.counts["read"] > before  # served from SSD now
    load.assert_clean()
    assert store.dram is None and store.stats()["placement"]["in_dram"] == 0


def test_attach_ssd_at_runtime_under_load(tmp_path, stores, admin_for):
    config = small_config(tmp_path, ssd=False)
    store = stores(config)
    admin = admin_for(store, config)
    new_dir = tmp_path / "nvme1"
    with StoreLoad(store) as load:
        load.wait_ops(600)
        assert store.ssd is None
        op = finished(
            admin, admin.attach("ssd", {"tiers": {"ssd": {"path": str(new_dir), "capacity": "16MiB"}}})
        )
        assert op["complete"] and op["progress"]["tiers"] == ["dram", "ssd"]
        load.wait_ops(1500)
    load.assert_clean()
    ssd = store.stats()["ssd"]
    assert ssd["puts"] > 0 and ssd["hits"] > 0  # demotions landed there and were read back
    assert (new_dir / "rank0").is_dir()


def test_attach_with_a_bad_section_names_the_key_and_changes_nothing(tmp_path, stores, admin_for):
    config = small_config(tmp_path, ssd=False)
    store = stores(config)
    admin = admin_for(store, config)
    op = admin.wait(admin.attach("ssd", {"tiers": {"ssd": {"capacity": "1MiB"}}}), 30)
    assert op["state"] == "failed" and "tiers.ssd" in op["error"] and "2 regions" in op["error"]
    op = admin.wait(admin.attach("ssd", {"tiers": {"ssd": {"pathh": "/x"}}}), 30)
    assert op["state"] == "failed" and "tiers.ssd.pathh: unknown key" in op["error"]
    assert store.ssd is None


def test_freeze_refuses_writes_and_keeps_reads_under_load(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store) as load:
        load.wait_ops(600)
        assert admin.freeze(True)["frozen"] is True
        used = store.stats()["placement"]["used"]
        reads, refused = load.stats.counts["read"], store.counts["refused_frozen"]
        load.wait_ops(600)
        assert store.counts["refused_frozen"] > refused  # sets are False while frozen
        assert load.stats.counts["read"] > reads  # reads go on
        assert store.stats()["placement"]["used"] <= used  # nothing new was placed
        assert admin.freeze(False)["frozen"] is False
        stored = load.stats.counts["stored"]
        load.wait_ops(600)
        assert load.stats.counts["stored"] > stored
    load.assert_clean()


def test_freeze_returns_once_the_sets_in_flight_are_over(tmp_path, stores):
    """A set already past the frozen check when freeze is asked still places its page: freeze
    waits for it, so nothing is placed once freeze has returned (the under-load test above failed
    on a loaded machine: ``used`` grew after freeze by such a set)."""
    store = stores(small_config(tmp_path, ssd=False))
    dram = store.dram
    assert dram is not None
    inside, release = threading.Event(), threading.Event()
    real_put = dram.put_batch

    def held_put(items, *args, **kwargs):  # type: ignore[no-untyped-def]
        inside.set()
        release.wait(10)
        return real_put(items, *args, **kwargs)

    dram.put_batch = held_put  # type: ignore[method-assign]
    page = np.full(64 << 10, 7, dtype=np.uint8)
    results: list[list[bool]] = []
    setter = threading.Thread(target=lambda: results.append(store.put_batch(["k"], [[memoryview(page)]])))
    setter.start()
    assert inside.wait(10)
    froze = threading.Event()
    freezer = threading.Thread(target=lambda: (store.freeze(True), froze.set()))
    freezer.start()
    time.sleep(0.3)
    assert store.frozen and not froze.is_set()  # refusing already, but the set in flight runs on
    release.set()
    assert froze.wait(10)
    setter.join(10)
    freezer.join(10)
    assert results == [[True]]  # the set that was in flight completed before freeze returned
    used = store.stats()["placement"]["used"]
    assert store.put_batch(["k2"], [[memoryview(page)]]) == [False]
    assert store.stats()["placement"]["used"] == used
    assert store.counts["quiesce_timeouts"] == 0


def test_clear_one_tenant_under_load_keeps_the_other(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    a = StoreLoad(store, threads=2, requests=60, key_of=lambda r, p: f"m/base~a/r{r}p{p}", seed=10)
    with a:
        a.wait_ops(600)
    a.assert_clean()
    held_a = [k for k in store.dram.keys() + list(store.ssd.engine.keys()) if tenant_of_key(k) == "a"]
    assert held_a
    stop = threading.Event()
    wrong: list[str] = []

    def read_a() -> None:  # tenant a's pages are read while they are removed: misses, never wrong
        while not stop.is_set():
            for key in held_a[:32]:
                buf = np.zeros(a.size, np.uint8)
                if store.get_batch_into([key], [parts(buf)])[0] and not np.array_equal(buf, a.content(key)):
                    wrong.append(key)

    reader = threading.Thread(target=read_a)
    b = StoreLoad(store, threads=4, requests=60, key_of=lambda r, p: f"m/base~b/r{r}p{p}", seed=20)
    with b:
        reader.start()
        b.wait_ops(600)
        op = finished(admin, admin.clear("a"))
        # not a count to compare with held_a: b's load may evict some of a's pages before the
        # clear, and copies of a's pages still on their way to the SSD land after held_a was
        # taken; what the clear promises is that no tier holds a page of a after it (b writes
        # only its own)
        assert op["complete"] and op["progress"]["pages_removed"] > 0
        assert not [k for k in store.dram.keys() + list(store.ssd.engine.keys()) if tenant_of_key(k) == "a"]
        b.wait_ops(300)
        stop.set()
        reader.join()
    b.assert_clean()
    assert not wrong
    left = [k for k in store.dram.keys() + list(store.ssd.engine.keys()) if tenant_of_key(k) == "a"]
    assert left == []
    tenants = store.stats()["tenants"]
    assert tenants["a"]["dram_bytes"] == 0 and tenants["a"]["ssd_bytes"] == 0
    assert tenants["b"]["dram_bytes"] > 0
    assert store.exists_prefix([f"m/base~a/r{r}p0" for r in range(1)]) == 0


def test_closing_the_store_ends_an_operation_in_progress(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store, threads=2) as load:
        load.wait_ops(300)
    load.assert_clean()
    store.freeze(True)  # the mover holds its queue: a DRAM drain cannot finish
    started = admin.detach("dram", "drain", timeout_s=600)
    begin = time.monotonic()
    store.close()
    assert time.monotonic() - begin < 30  # bounded, not the operation's 600 s
    op = admin.wait(started, 30)
    assert op["state"] != "running"
    with pytest.raises(Exception, match="closing"):
        store.resize_tier("dram", 2 * MiB)


def test_an_operation_that_runs_into_its_timeout_says_what_it_left_and_leaves_the_store_consistent(
    tmp_path, stores, admin_for
):
    """``admin detach --timeout``: a DRAM drain that cannot finish (the mover is held) stops at its
    deadline; the operation is done but not complete, its progress names the pages it left (those
    without an SSD copy are dropped and forgotten by the placement), and the store keeps serving exact bytes."""
    config = small_config(tmp_path)
    store = stores(config)
    admin = admin_for(store, config)
    with StoreLoad(store, threads=2) as load:
        load.wait_ops(600)
    load.assert_clean()
    store.freeze(True)  # the mover holds its queue: the drain cannot move a page down
    in_dram = store.stats()["dram"]["entries"]
    assert in_dram > 0
    begin = time.monotonic()
    op = finished(admin, admin.detach("dram", "drain", timeout_s=2))
    assert time.monotonic() - begin < 2 + 15  # the deadline, plus quiescing and forgetting
    assert not op["complete"], op
    progress = op["progress"]
    assert progress["dram_pages_left"] > 0  # named as left, not silently lost
    # of what was left, the pages without an SSD copy are dropped; those with one stay found
    assert 0 < progress["pages_dropped"] <= progress["dram_pages_left"]
    assert progress["tiers"] == ["ssd"] and store.dram is None
    placement = store.stats()["placement"]
    assert placement["in_dram"] == 0  # nothing is believed to be in a tier that is gone
    store.freeze(False)
    with StoreLoad(store, threads=2) as load:
        load.wait_ops(600)
    load.assert_clean()
