"""One cache per host, through SGLang's own factory and controller (issue 17): MLA ranks at TP=2 in
two scheduler processes share one copy (DRAM, then SSD) with no service started by hand; two
independent instances share a prefix; a restarted SGLang side hits DRAM at once; a service killed
mid-storm costs misses within the deadline, never an exception or a wrong byte, and comes back
with its SSD data while the clients reconnect by themselves."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from host_cache_procs import PrivateHostCache, service_pids
from sglang_helpers import SMALL, make_backend

from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size
SCHEDULER = Path(__file__).with_name("scheduler_proc.py")


def keys(n: int, tag: str) -> list[str]:
    return [f"{tag}{i:060x}" for i in range(n)]


def scheduler(role: str, spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(SCHEDULER), role, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(procs: list[subprocess.Popen[bytes]], timeout: float = 600) -> list[str]:
    try:
        logs = [p.communicate(timeout=timeout)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert all(p.returncode == 0 for p in procs), "\n-----\n".join(log[-4000:] for log in logs)
    return logs


def test_mla_tp2_ranks_share_one_cache_through_dram_and_ssd(host_cache: PrivateHostCache) -> None:
    """The preset as shipped (tiers.host_cache: auto) with private paths and test sizes: rank 0
    stores, rank 1 finds every page byte-exact, also once they were demoted to SSD, and SGLang's
    MIN-reduced hit count is the full prefix on both ranks. Nobody starts the service by hand."""
    extra = host_cache.extra(dram={"capacity": "1MiB", "slab_size": "256KiB"})  # 128 MLA pages
    assert extra["tiers"]["host_cache"] == "auto"
    assert host_cache.pid() is None and not service_pids(str(host_cache.run_dir))
    pages_a, pages_b = 8, 192
    outs = [host_cache.tmp / f"rank{r}.json" for r in range(2)]
    world = str(host_cache.tmp / "gloo-world")
    procs = [
        scheduler(
            "mla-rank",
            {
                "rank": r,
                "world": world,
                "extra": extra,
                "pages_a": pages_a,
                "pages_b": pages_b,
                "out": str(outs[r]),
            },
        )
        for r in range(2)
    ]
    finish(procs)
    rank0, rank1 = (json.loads(o.read_text()) for o in outs)
    full = pages_a * PS
    for r in (rank0, rank1):
        assert r["host_cache"] and r["tiers"] == ["host_cache"]
        assert r["hit_tokens_dram"] == full and r["hit_tokens_ssd"] == full  # SGLang's MIN over ranks
    assert rank0["writer"] and not rank1["writer"]
    assert rank1["bytes_ok_dram"] and rank1["bytes_ok_ssd"]
    assert rank0["bytes_ok_dram"] and rank0["bytes_ok_ssd"]
    assert rank0["dram_entries_before_ssd_read"] <= 128
    assert rank0["promotions_after"] - rank0["promotions_before"] >= pages_a  # A came back from SSD
    assert len(rank0["clients"]) >= 2  # both ranks were clients of the one service
    pid = rank0["service_pid"]
    assert service_pids(str(host_cache.run_dir)) == [pid] and host_cache.pid() == pid


@pytest.mark.parametrize("slab", ["1MiB", "16KiB"], ids=["whole", "chunked"])
def test_two_mha_instances_with_the_same_yaml_share_a_prefix(host_cache: PrivateHostCache, slab: str) -> None:
    """Also with KV pages (24 KiB) larger than the service's slab: both sides cut them alike."""
    extra = host_cache.extra(host_cache="on", dram={"slab_size": slab})
    backend, host = make_backend("page_first", extra=extra)
    try:
        assert backend.host_cache and [t.name for t in backend.store.tiers] == ["host_cache"]
        assert backend._kv_chunks() == (2 if slab == "16KiB" else 1)
        ks = keys(6, "mha")
        src = host.alloc(6 * PS)
        fill_random_pages(host, src, seed=21)
        assert backend.batch_set_v1(ks, src) == [True] * 6
        out = host_cache.tmp / "reader.json"
        finish([scheduler("mha-reader", {"extra": extra, "keys": ks, "seed": 21, "out": str(out)})])
        got = json.loads(out.read_text())
        assert got["host_cache"] and got["exists"] == 6 and got["got"] == [True] * 6 and got["bytes_ok"]
        assert got["service_pid"] == host_cache.pid()
    finally:
        backend.close()


def test_a_restarted_sglang_side_hits_dram_at_once(host_cache: PrivateHostCache) -> None:
    extra = host_cache.extra(host_cache="on")
    first, host = make_backend("page_first", extra=extra)
    ks = keys(8, "rs")
    src = host.alloc(8 * PS)
    fill_random_pages(host, src, seed=5)
    want = page_snapshot(host, src)
    assert first.batch_set_v1(ks, src) == [True] * 8
    pid = host_cache.pid()
    first.close()  # SGLang detaches or restarts; the service stays

    second, host2 = make_backend("page_first", extra=extra)
    try:
        before = second.tier_stats()["tiers"]["host_cache"]["service"]["store"]["tiers"]
        assert second.batch_exists(ks) == 8  # the first call after attach already hits
        dst = host2.alloc(8 * PS)
        assert second.batch_get_v1(ks, dst) == [True] * 8
        assert all(torch.equal(a, b) for a, b in zip(want, page_snapshot(host2, dst), strict=True))
        after = second.tier_stats()["tiers"]["host_cache"]["service"]["store"]["tiers"]
        assert after["dram"]["hits"] - before["dram"]["hits"] == 8  # from DRAM...
        assert after["placement"].get("promotions", 0) == before["placement"].get(
            "promotions", 0
        )  # ...not SSD
        assert host_cache.pid() == pid
    finally:
        second.close()


def test_a_service_killed_mid_storm_costs_misses_then_comes_back_with_its_ssd_data(
    host_cache: PrivateHostCache,
) -> None:
    timeout_s = 2.0
    extra = host_cache.extra(host_cache="on", ssd={"mode": "write_through"})
    extra["io"] = {"timeout_s": timeout_s}
    backend, host = make_backend("page_first", extra=extra)
    stop = threading.Event()
    errors: list[str] = []
    wrong: list[str] = []
    durations: list[float] = []
    hits_after: list[int] = [0] * 4
    killed_at: list[float] = []
    try:
        warm = keys(16, "warm")
        src = host.alloc(16 * PS)
        fill_random_pages(host, src, seed=9)
        want = page_snapshot(host, src)
        assert backend.batch_set_v1(warm, src) == [True] * 16
        deadline = time.monotonic() + 30
        while host_cache.stats()["store"]["tiers"]["ssd"]["entries"] < 16:  # on SSD (write-through)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first = host_cache.pid()
        assert first is not None

        def storm(t: int) -> None:
            dst = host.alloc(4 * PS)
            mine = host.alloc(2 * PS)
            fill_random_pages(host, mine, seed=1000 + t)
            n = 0
            while not stop.is_set():
                pick = [(t * 4 + n + i) % 16 for i in range(4)]
                start = time.monotonic()
                try:
                    backend.batch_exists([warm[i] for i in pick])
                    got = backend.batch_get_v1([warm[i] for i in pick], dst)
                    backend.batch_set_v1(keys(2, f"t{t}n{n % 8}-"), mine)  # churn that evicts nothing
                except Exception as exc:  # the backend promises never to raise
                    errors.append(repr(exc))
                    return
                durations.append(time.monotonic() - start)
                for j, ok in enumerate(got):
                    if not ok:
                        break  # only the leading run is used
                    page = page_snapshot(host, dst[j * PS : (j + 1) * PS])[0]
                    if not torch.equal(page, want[pick[j]]):
                        wrong.append(f"thread {t} page {pick[j]}")
                    elif killed_at and time.monotonic() > killed_at[0]:
                        hits_after[t] += 1
                n += 1

        threads = [threading.Thread(target=storm, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        time.sleep(1.0)
        killed_at.append(time.monotonic())
        host_cache.kill(first)  # SIGKILL mid-storm
        second = host_cache.wait_pid(other_than=first)  # restarted by the backend's keeper
        deadline = time.monotonic() + 60
        while min(hits_after) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for th in threads:
            th.join(30)
        assert not any(th.is_alive() for th in threads)
        print(
            f"storm: {len(durations)} rounds, slowest {max(durations):.3f} s, hits after restart {hits_after}"
        )
        assert errors == [] and wrong == []
        assert max(durations) < 3 * timeout_s + 1  # exists + get + set, each bounded by io.timeout_s
        assert min(hits_after) > 0, hits_after  # every thread read SSD data from the new service
        assert second != first
    finally:
        stop.set()
        backend.close()
