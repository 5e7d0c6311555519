"""Attach in seconds: a clean close leaves a summary per region and a reopen reads only those;
regions open at a crash are scanned in the background while the engine already serves."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

from ssd_helpers import check_get, open_engine, value_for

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.ssd import rescan as rescan_mod
from hicache_mooncake.ssd.format import parse_region_file_name
from hicache_mooncake.ssd.recover import scan_region
from hicache_mooncake.ssd.summary import SUFFIX

OPTS = {"capacity_bytes": 16 << 20, "region_size": 1 << 20, "direct_io": "off"}
CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")


def _fill(d: str, n: int, tag: str = "k") -> dict[str, int]:
    keys = {f"{tag}{i}": 1000 + 37 * i for i in range(n)}
    with open_engine(d, **OPTS) as e:
        items = list(keys.items())
        for j in range(0, n, 8):
            assert all(e.put_batch([(k, [memoryview(value_for(k, s))]) for k, s in items[j : j + 8]]))
    return keys


def test_a_clean_reopen_reads_summaries_not_regions(ssd_dir: str) -> None:
    keys = _fill(ssd_dir, 300)
    regions = [n for n in os.listdir(ssd_dir) if n.endswith(".bin")]
    assert len([n for n in os.listdir(ssd_dir) if n.endswith(SUFFIX)]) == len(regions) > 3
    with open_engine(ssd_dir, **OPTS) as e:
        st = e.stats()
        assert st["recover_from_summaries"] == len(regions) and st["recovering_regions"] == 0
        assert st["entries"] == len(keys) and st.get("recover_corrupt", 0) == 0
        assert all(check_get(e, k, s) for k, s in keys.items())


def test_after_a_crash_the_engine_serves_while_the_open_regions_are_scanned(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "ssd")
    ack = str(tmp_path / "ack")
    p = subprocess.Popen([sys.executable, CHILD, d, ack, "3", "off", str(400 << 20)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if os.path.exists(ack) and os.path.getsize(ack) > 3_000:
            break
        time.sleep(0.02)
    assert p.poll() is None, "the writer ended before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)
    acked: dict[str, int] = {}
    with open(ack) as f:
        for line in f:
            if line.endswith("\n") and not line.startswith("#"):
                k, s = line.split()
                acked[k] = int(s)
    assert len(acked) > 20
    unsummarized: set[str] = set()  # acknowledged keys in regions left without a summary by the kill
    for name in os.listdir(d):
        rid = parse_region_file_name(name)
        if rid is not None and not os.path.exists(os.path.join(d, name[: -len(".bin")] + SUFFIX)):
            scan = scan_region(os.path.join(d, name), rid, 4 << 20, None)
            unsummarized |= {x.key for x in scan.entries} & set(acked)
    gate = threading.Event()
    real = rescan_mod.recover

    def slow_recover(*a, **kw):  # type: ignore[no-untyped-def]
        gate.wait(30)  # hold the background scan: the engine must serve meanwhile
        return real(*a, **kw)

    monkeypatch.setattr(rescan_mod, "recover", slow_recover)
    e = SsdEngine(SsdOptions(dirs=(d,), capacity_bytes=512 << 20, region_size=4 << 20, direct_io="off"))
    try:
        st = e.stats()
        assert st["recovering_regions"] >= 1  # the regions open at the kill have no summary
        assert st["recover_from_summaries"] >= 1
        served_early = sum(check_get(e, k, s) for k, s in acked.items())
        assert e.put("during", [memoryview(value_for("during", 3000))]) and check_get(e, "during", 3000)
        gate.set()
        assert e.wait_recovered(60)
        assert e.stats()["recovering_regions"] == 0
        assert all(check_get(e, k, s) for k, s in acked.items()), "an acknowledged page was lost"
        assert served_early == len(acked) - len(unsummarized)
    finally:
        gate.set()
        e.close()
    with open_engine(d, capacity_bytes=512 << 20, region_size=4 << 20, direct_io="off") as e2:
        assert e2.stats()["recovering_regions"] == 0 and all(check_get(e2, k, s) for k, s in acked.items())


def test_a_store_of_the_previous_format_gets_summaries_after_one_scan(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "format_v1_store.tar.gz")
    with tarfile.open(fixture) as t:
        t.extractall(tmp_path, filter="data")
    store = str(tmp_path / "store")
    opts = {"capacity_bytes": 4 * (64 << 10), "region_size": 64 << 10, "direct_io": "off"}
    with open_engine(store, **opts) as e:
        assert e.stats()["recover_from_summaries"] == 0 and e.stats()["entries"] == 10
    with open_engine(store, **opts) as e:
        assert e.stats()["recover_from_summaries"] >= 1 and e.stats()["entries"] == 10
        assert all(check_get(e, f"v1-{i}", 1 + 997 * i) for i in range(10))
    shutil.rmtree(store)


def test_a_summary_that_lists_entries_beyond_its_region_is_not_used(ssd_dir: str) -> None:
    """A summary with a valid checksum whose entry lies past the region's end (a bug, or a file
    from elsewhere) is not this region's index: the region is scanned instead, nothing is lost."""
    from hicache_mooncake.ssd.summary import read_summary, write_summary

    keys = _fill(ssd_dir, 300)
    regions = sorted(n for n in os.listdir(ssd_dir) if n.endswith(".bin"))
    path = os.path.join(ssd_dir, regions[0])
    rid = parse_region_file_name(regions[0])
    assert rid is not None
    with open_engine(ssd_dir, **OPTS) as e:
        epoch = e._core.epoch
    summ = read_summary(path, rid, OPTS["region_size"], epoch)
    assert summ is not None and summ.keys
    entries = list(zip(summ.keys, summ.offsets, summ.lengths, summ.seqs, strict=True))
    entries[0] = (entries[0][0], summ.end_offset + 4096, entries[0][2], entries[0][3])
    write_summary(path, rid, summ.header.gen, epoch, summ.end_offset, entries)
    assert read_summary(path, rid, OPTS["region_size"], epoch) is None
    with open_engine(ssd_dir, **OPTS) as e:
        assert e.wait_recovered(60)
        st = e.stats()
        assert st["recover_from_summaries"] == len(regions) - 1 and st["entries"] == len(keys)
        assert all(check_get(e, k, s) for k, s in keys.items())
