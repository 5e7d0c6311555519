"""Metrics of the one store over a real DRAM tier and a real SSD tier (region files in a temp dir),
served over real HTTP: per-rank ports from one base, labels, per-tier figures and latencies,
/healthz, discovery files, and the `stats` command that reads them back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from transport_procs import SECRET, free_port, node_command, node_env

from hicache_mooncake.cli import main
from hicache_mooncake.config.metrics import MetricsConfig
from hicache_mooncake.metrics import discovery as metrics_discovery
from hicache_mooncake.metrics.exporter import MetricsExporter
from hicache_mooncake.metrics.rank import BackendMetrics, RankLabels, rank_index
from hicache_mooncake.metrics.scrape import quantile, scrape
from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAGE = 64 << 10
MiB = 1 << 20


def page(key: str) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def parts(arr: np.ndarray) -> list[memoryview]:
    return [memoryview(arr[: PAGE // 2]), memoryview(arr[PAGE // 2 :])]


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float | None:
    for (n, lbls), v in found.items():
        if n == name and all(dict(lbls).get(k) == want for k, want in labels.items()):
            return v
    return None


@pytest.fixture
def rank(tmp_path: Path) -> Iterator[Any]:
    """A rank: a store (2 MiB DRAM + 32 MiB SSD) and its metrics, served on ``base + rank``."""
    made: list[tuple[TieredStore, BackendMetrics]] = []

    def make(index: int, base: int = 0, dram_mib: int = 2) -> tuple[TieredStore, BackendMetrics, int]:
        d = tmp_path / f"ssd{len(made)}"
        d.mkdir()
        engine = SsdEngine(
            SsdOptions(dirs=(str(d),), capacity_bytes=32 * MiB, region_size=MiB, direct_io="off")
        )
        store = TieredStore(
            [DramTier(dram_mib * MiB, MiB, prefault=False), SsdTier(engine)],
            lambda: make_policy("lru"),
            StoreOptions(),
        )
        metrics = BackendMetrics(store.stats, RankLabels("org/m", index))
        metrics.instrument(store.tiers)
        made.append((store, metrics))
        port = metrics.serve(
            MetricsConfig(port=base, discovery_dir=str(tmp_path / "disc")), lambda: (True, {"rank": index})
        )
        return store, metrics, port

    yield make
    for store, metrics in made:
        metrics.close()
        store.close()


def test_rank_index_is_unique_over_tp_pp_dp():
    seen = {rank_index(t, 4, p, 2, d) for t in range(4) for p in range(2) for d in range(3)}
    assert seen == set(range(4 * 2 * 3))


def consecutive_free_ports(n: int) -> int:
    """A base port such that ``base .. base + n - 1`` could all be bound just now (checked by
    binding them; another process may still take one before the test does, so it is rare, not
    impossible)."""
    import socket

    for _ in range(100):
        base = free_port()
        if base + n > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise AssertionError("no run of free ports found")


def test_every_rank_serves_on_its_own_port_from_one_base(rank):
    base = consecutive_free_ports(2)
    _s0, _m0, p0 = rank(0, base)
    _s1, _m1, p1 = rank(1, base)
    assert (p0, p1) == (base, base + 1)
    for index, port in ((0, p0), (1, p1)):
        found = samples(f"http://127.0.0.1:{port}/metrics")
        assert value(found, "hicache_mooncake:backend_info", rank=str(index), model="org/m") == 1.0
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read())
        assert health == {"status": "ok", "rank": index}


def test_a_taken_port_names_the_key_and_the_rank(rank):
    _s, _m, port = rank(0, 0)
    with pytest.raises(OSError, match=rf"metrics.port \d+ \+ rank 1 = {port}"):
        rank(1, port - 1)


def test_per_tier_figures_say_where_pages_are_served_and_how_fast(rank):
    store, metrics, port = rank(0, 0)
    keys = [f"k{i:04d}" for i in range(80)]  # 5 MiB of pages through 2 MiB of DRAM: demotions
    arrays = {k: page(k) for k in keys}
    for i in range(0, len(keys), 8):
        batch = keys[i : i + 8]
        assert all(store.put_batch(batch, [parts(arrays[k]) for k in batch]))
    assert store.flush(30)
    dst = [np.zeros(PAGE, np.uint8) for _ in range(8)]
    got = store.get_batch_into(keys[:8], [parts(a) for a in dst])  # the oldest: demoted to SSD
    assert all(got) and all(np.array_equal(a, arrays[k]) for a, k in zip(dst, keys[:8], strict=True))
    metrics.record("get", 8, 0, 8 * PAGE, 0.001)
    assert store.flush(30)  # the promotions pushed DRAM pages down: let the mover finish
    assert all(store.exists_batch(keys[:8]))
    assert store.exists_batch(["k-absent"]) == [False]  # no tier has it: DRAM is asked too (its op)

    found = samples(f"http://127.0.0.1:{port}/metrics")
    t = {"model": "org/m", "rank": "0"}
    assert value(found, "hicache_mooncake:tier_hits_total", tier="ssd", **t) == 8
    assert value(found, "hicache_mooncake:tier_misses_total", tier="dram", **t) == 8
    assert value(found, "hicache_mooncake:tier_read_bytes_total", tier="ssd", **t) == 8 * PAGE
    # 80 sets, then the 8 SSD hits promoted back into DRAM
    assert value(found, "hicache_mooncake:tier_written_bytes_total", tier="dram", **t) == 88 * PAGE
    assert value(found, "hicache_mooncake:tier_written_bytes_total", tier="ssd", **t) >= 8 * PAGE
    assert value(found, "hicache_mooncake:tier_evictions_total", tier="dram", **t) >= 8
    assert value(found, "hicache_mooncake:demotions_total", **t) >= 8
    assert value(found, "hicache_mooncake:promotions_total", **t) == 8
    assert value(found, "hicache_mooncake:mover_queue_depth", **t) == 0
    assert value(found, "hicache_mooncake:mover_pages_total", kind="demoted", result="written", **t) >= 8
    stats = store.stats()
    assert value(found, "hicache_mooncake:tier_entries", tier="ssd", **t) == stats["ssd"]["entries"]
    for tier, op in (("dram", "get"), ("dram", "set"), ("dram", "exists"), ("ssd", "get"), ("ssd", "set")):
        assert value(found, "hicache_mooncake:tier_op_seconds_count", tier=tier, op=op, **t) >= 1, (tier, op)
    assert value(found, "hicache_mooncake:call_seconds_count", op="get", **t) == 1


def test_refusals_checksum_errors_and_recovery_reach_the_exporter(rank, tmp_path):
    """The series an operator alerts on, scraped over HTTP with values that moved: a page larger
    than any tier can hold is refused by cause (``too_large``), a payload corrupted on disk is a
    counted checksum error (and a miss, never wrong bytes), and a store reopened over the SSD
    directory says how many entries it recovered and how long that took."""
    from hicache_mooncake.ssd.format import BLOCK

    store, _metrics, port = rank(0, 0)
    keys = [f"c{i:03d}" for i in range(48)]  # 3 MiB through 2 MiB of DRAM: the oldest go to SSD
    arrays = {k: page(k) for k in keys}
    for i in range(0, len(keys), 8):
        assert all(store.put_batch(keys[i : i + 8], [parts(arrays[k]) for k in keys[i : i + 8]]))
    assert store.flush(30)
    huge = np.zeros(MiB + MiB // 2, np.uint8)  # larger than a DRAM slab and an SSD region (1 MiB)
    assert store.put_batch(["big"], [[memoryview(huge)]]) == [False]
    assert store.flush(30)
    assert store.ssd is not None and store.dram is not None
    victim = next(k for k in keys if store.ssd.contains(k) and not store.dram.contains(k))
    engine = store.ssd.engine
    loc = engine._core.index.get(victim)
    assert loc is not None
    with open(engine._core.regions[loc.region].path, "r+b") as f:  # one payload byte flipped on disk
        f.seek(loc.offset + BLOCK + loc.length // 2)
        b = f.read(1)[0]
        f.seek(loc.offset + BLOCK + loc.length // 2)
        f.write(bytes([b ^ 0x10]))
    dst = np.zeros(PAGE, np.uint8)
    assert store.get_batch_into([victim], [parts(dst)]) == [False]  # a miss, not corrupt bytes

    found = samples(f"http://127.0.0.1:{port}/metrics")
    t = {"model": "org/m", "rank": "0"}
    too_large = [
        value(found, "hicache_mooncake:tier_refusals_total", tier=tier, cause="too_large", **t)
        for tier in ("dram", "ssd")
    ]
    assert sum(v or 0 for v in too_large) >= 1, too_large
    assert value(found, "hicache_mooncake:tier_checksum_errors_total", tier="ssd", **t) == 1

    store.close(flush_timeout_s=10)
    engine2 = SsdEngine(
        SsdOptions(dirs=(engine.options.dirs[0],), capacity_bytes=32 * MiB, region_size=MiB, direct_io="off")
    )
    reopened = TieredStore([SsdTier(engine2)], lambda: make_policy("lru"), StoreOptions())
    metrics = BackendMetrics(reopened.stats, RankLabels("org/m", 2))
    try:
        port3 = metrics.serve(
            MetricsConfig(port=0, discovery_dir=str(tmp_path / "disc3")), lambda: (True, {})
        )
        found = samples(f"http://127.0.0.1:{port3}/metrics")
        t2 = {"model": "org/m", "rank": "2"}
        recovered = value(found, "hicache_mooncake:tier_recovered_entries", tier="ssd", **t2)
        assert recovered is not None and recovered >= 1
        assert value(found, "hicache_mooncake:tier_recovery_seconds", tier="ssd", **t2) is not None
    finally:
        metrics.close()
        reopened.close()


def test_no_series_that_can_never_move(rank):
    store, _metrics, port = rank(0, 0)
    key = "only"
    assert store.put_batch([key], [parts(page(key))]) == [True]
    found = samples(f"http://127.0.0.1:{port}/metrics")
    names = {(n, dict(lbls).get("tier"), dict(lbls).get("cause")) for n, lbls in found}
    # the DRAM tier has no free-space floor, no checksums, no recovery; nothing failed a write
    assert ("hicache_mooncake:tier_refusals_total", "dram", "floor") not in names
    assert not any(n == "hicache_mooncake:tier_checksum_errors_total" and t == "dram" for n, t, _ in names)
    assert not any(n == "hicache_mooncake:tier_recovery_seconds" and t == "dram" for n, t, _ in names)
    assert not any(n.startswith("hicache_mooncake:tier_write_failures") for n, _t, _ in names)
    # the mover never copied (write_on_evict) nor flushed (still attached)
    assert value(found, "hicache_mooncake:mover_pages_total", kind="copied") is None
    assert value(found, "hicache_mooncake:mover_pages_total", kind="flushed") is None


def test_series_stay_bounded_under_many_calls(rank):
    store, _metrics, port = rank(0, 0)
    before = len(samples(f"http://127.0.0.1:{port}/metrics"))
    for i in range(300):
        key = f"x{i}"
        store.put_batch([key], [parts(page(key))])
        store.get_batch_into([key], [parts(np.zeros(PAGE, np.uint8))])
        store.exists_prefix([key, "absent"])
    store.flush(30)
    grown = len(samples(f"http://127.0.0.1:{port}/metrics"))
    # a handful of new series appear with the first events of a kind, then nothing grows
    for i in range(300):
        key = f"y{i}"
        store.put_batch([key], [parts(page(key))])
        store.get_batch_into([key], [parts(np.zeros(PAGE, np.uint8))])
    store.flush(30)
    assert len(samples(f"http://127.0.0.1:{port}/metrics")) == grown >= before


def test_healthz_answers_503_when_unhealthy_or_broken(tmp_path):
    from prometheus_client import CollectorRegistry

    state: dict[str, Any] = {"ok": False}

    def health() -> tuple[bool, dict[str, Any]]:
        if state.get("boom"):
            raise RuntimeError("disk on fire")
        return state["ok"], {"why": "draining"}

    exporter = MetricsExporter(CollectorRegistry(), health, "svc", {"x": "1"})
    port = exporter.start("127.0.0.1", 0, str(tmp_path / "disc"))
    try:
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert info.value.code == 503 and json.loads(info.value.read())["why"] == "draining"
        state["boom"] = True
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert "disk on fire" in json.loads(info.value.read())["error"]
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
        assert info.value.code == 404
        [entry] = metrics_discovery.endpoints(tmp_path / "disc")
        assert (
            entry.role == "svc"
            and entry.url == f"http://127.0.0.1:{port}/metrics"
            and entry.labels == {"x": "1"}
        )
    finally:
        exporter.close()
    assert metrics_discovery.endpoints(tmp_path / "disc") == []
    exporter.close()  # idempotent


def test_discovery_skips_and_removes_entries_of_dead_processes(tmp_path):
    directory = tmp_path / "disc"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = metrics_discovery.register(
        directory, metrics_discovery.Endpoint("backend", "http://x/metrics", dead.pid), 1
    )
    assert metrics_discovery.endpoints(directory) == []
    live = metrics_discovery.Endpoint("node", "http://y/metrics", os.getpid(), {"node": "a"})
    metrics_discovery.register(directory, live, 2)
    assert not stale.exists() and metrics_discovery.endpoints(directory) == [live]
    assert (directory.stat().st_mode & 0o777) == 0o700


def test_discovery_refuses_a_directory_others_can_write(tmp_path):
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        metrics_discovery.register(directory, metrics_discovery.Endpoint("backend", "u", os.getpid()), 1)


def test_quantile_interpolates_within_the_bucket():
    buckets = [(0.001, 50.0), (0.01, 90.0), (0.1, 100.0), (float("inf"), 100.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.001)
    assert quantile(0.7, buckets) == pytest.approx(0.001 + 0.009 * 0.5)
    assert quantile(0.99, buckets) == pytest.approx(0.01 + 0.09 * 0.9)
    assert quantile(0.5, [(float("inf"), 0.0)]) is None
    assert quantile(0.99, [(0.001, 1.0), (float("inf"), 100.0)]) == 0.001


def test_stats_reads_every_registered_rank(rank, tmp_path, capsys):
    for index in (0, 1):
        store, _m, _port = rank(index, 0)
        store.put_batch([f"r{index}"], [parts(page("r"))])
        store.get_batch_into([f"r{index}", "nope"], [parts(np.zeros(PAGE, np.uint8)) for _ in range(2)])
    assert main(["stats", "--dir", str(tmp_path / "disc")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "model org/m: 2 rank(s)" in out
    assert any(ln.split()[:3] == ["0", "dram", "1"] for ln in lines)
    assert any(ln.split()[:3] == ["1", "dram", "1"] for ln in lines)
    assert any(ln.split()[:3] == ["all", "dram", "2"] for ln in lines)
    assert main(["stats", "--dir", str(tmp_path / "disc"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in report["ranks"]] == ["0", "1"]
    assert report["total"]["dram"]["hits"] == 2 and report["total"]["dram"]["entries"] == 2
    assert report["ranks"][0]["tiers"]["dram"]["latency_s"]["get"]["p50"] > 0


def test_stats_without_any_endpoint_says_where_it_looked(tmp_path, capsys):
    assert main(["stats", "--dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "nothing registered in" in err and "metrics.port" in err


def test_node_exports_metrics_and_healthz(tmp_path):
    """A real memory node process with --metrics-port: /healthz answers ok, /metrics has its store,
    and SIGTERM takes both (and its discovery file) away."""
    cfg = tmp_path / "node.yaml"
    disc = tmp_path / "disc"
    cfg.write_text(
        yaml.safe_dump(
            {
                "node": {
                    "node_id": "n1",
                    "port": 0,
                    "capacity": "8MiB",
                    "shm": False,
                    "metrics": {"discovery_dir": str(disc)},
                }
            }
        )
    )
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        node_command(cfg, "--ready-file", str(ready), "--metrics-port", "0"),
        env=node_env(SECRET),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        report = None
        for _ in range(300):
            found = metrics_discovery.endpoints(disc)
            if found:
                report = scrape(found[0].url)
                break
            assert proc.poll() is None
            time.sleep(0.05)
        assert report is not None and report.labels == {"node": "n1"}
        assert report.process["capacity_bytes"] >= 8 * MiB
        health = json.loads(urllib.request.urlopen(found[0].healthz, timeout=5).read())
        assert health["status"] == "ok" and health["node"] == "n1"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(15)
    assert metrics_discovery.endpoints(disc) == []


def test_each_tenant_has_its_own_figures_and_share(tmp_path):
    from hicache_mooncake.keys import tenant_of_key
    from hicache_mooncake.tiers.policy.quotas import TenantShare

    store = TieredStore(
        [DramTier(4 * MiB, MiB, prefault=False)],
        lambda: make_policy("lru"),
        StoreOptions(),
        tenant_of=tenant_of_key,
        tenant_shares={"team-a": TenantShare(dram=0.5, ssd=1.0)},
    )
    metrics = BackendMetrics(store.stats, RankLabels("org/m", 0))
    try:
        port = metrics.serve(MetricsConfig(port=0, discovery_dir=str(tmp_path / "disc")), lambda: (True, {}))
        a = [f"org/d~team-a/a{i}" for i in range(6)]
        b = [f"org/d/b{i}" for i in range(3)]
        for keys in (a, b):
            assert all(store.put_batch(keys, [parts(page(k)) for k in keys]))
        dst = [np.zeros(PAGE, np.uint8) for _ in range(4)]
        got = store.get_batch_into([*a[:3], "org/d~team-a/never"], [parts(x) for x in dst])
        assert got == [True, True, True, False]
        assert store.exists_prefix([*b, "org/d/missing"]) == 3
        found = samples(f"http://127.0.0.1:{port}/metrics")
        t = {"model": "org/m", "rank": "0"}
        name = "hicache_mooncake:tenant_pages_total"
        assert value(found, name, tenant="team-a", op="get", result="hit", **t) == 3
        assert value(found, name, tenant="team-a", op="get", result="miss", **t) == 1
        assert value(found, name, tenant="team-a", op="set", result="stored", **t) == 6
        assert value(found, name, tenant="(default)", op="exists", result="hit", **t) == 3
        assert value(found, name, tenant="(default)", op="exists", result="miss", **t) == 1
        used = "hicache_mooncake:tenant_used_bytes"
        assert value(found, used, tenant="team-a", tier="dram", **t) == 6 * PAGE
        assert value(found, used, tenant="(default)", tier="dram", **t) == 3 * PAGE
        share = "hicache_mooncake:tenant_share_bytes"
        assert value(found, share, tenant="team-a", tier="dram", **t) > 0
        assert value(found, share, tenant="(default)", tier="dram", **t) is None  # no share, no series
    finally:
        metrics.close()
        store.close()
