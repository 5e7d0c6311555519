"""Any mix of instances starts with the shipped default preset: two MHA TP1 servers and one MLA TP2
pair on one host, each with the same YAML (the README's launch line), in every start order (the
two MHA servers are alike: the MLA pair first, between them, last), as real processes. Every rank gets hits and byte-exact pages; no ``SsdInUseError``
reaches anyone: a second in-process server finds the rank directory held and takes its own
(saying so); once the host cache runs, TP1 servers join it and share pages with their model."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from host_cache_procs import PrivateHostCache

from hicache_mooncake.config import validate_config
from hicache_mooncake.ssd.format import LOCK_NAME
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration
PROC = Path(__file__).with_name("instances_mix_proc.py")

# (name, kind, tp_rank, tp_size): started one after another, each once the previous one has stored
ORDERS = {
    "mha-first": [
        ("mha-a", "mha", 0, 1),
        ("mha-b", "mha", 0, 1),
        ("mla-0", "mla", 0, 2),
        ("mla-1", "mla", 1, 2),
    ],
    "mla-between": [
        ("mha-a", "mha", 0, 1),
        ("mla-0", "mla", 0, 2),
        ("mla-1", "mla", 1, 2),
        ("mha-b", "mha", 0, 1),
    ],
    "mla-first": [
        ("mla-0", "mla", 0, 2),
        ("mla-1", "mla", 1, 2),
        ("mha-a", "mha", 0, 1),
        ("mha-b", "mha", 0, 1),
    ],
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_two_mha_tp1_and_an_mla_tp2_pair_all_get_hits_in_any_start_order(
    order: str, host_cache: PrivateHostCache
) -> None:
    yaml_path = host_cache.write_yaml(host_cache.extra())  # the default preset: tiers.host_cache auto
    out = host_cache.tmp / "out"
    out.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: dict[str, bytes] = {}
    results: dict[str, dict[str, object]] = {}
    try:
        for name, kind, rank, size in ORDERS[order]:
            cmd = [sys.executable, str(PROC), name, kind, str(rank), str(size), str(yaml_path), str(out)]
            procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while not (out / f"{name}.json").exists():
                assert procs[name].poll() is None, procs[name].communicate()[0].decode()
                assert time.monotonic() < deadline, f"{name} did not report"
                time.sleep(0.05)
            results[name] = json.loads((out / f"{name}.json").read_text())
            host_cache.pid()  # remember a service for the teardown
        objects = host_cache.stats()["store"]["objects"]
    finally:
        (out / "stop").touch()
        for name, proc in procs.items():
            try:
                logs[name] = proc.communicate(timeout=60)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                logs[name] = proc.communicate()[0]
    text = {name: log.decode() for name, log in logs.items()}
    assert all(p.returncode == 0 for p in procs.values()), text
    assert not any("SsdInUseError" in t for t in text.values()), text
    for name, r in results.items():
        assert r["hits"] == [True] * 8 and r["exact"] == [True] * 8, (name, r, text[name])
    assert results["mla-0"]["host_cache"] and results["mla-1"]["host_cache"]  # MLA ranks share one copy
    if order == "mha-first":  # no service yet: both keep their tiers in-process, in their own directories
        assert not results["mha-a"]["host_cache"] and not results["mha-b"]["host_cache"]
        said = text["mha-b"]
        assert "is in use by another process" in said and "rank0_0_0_0-1" in said, said
        assert objects == 8  # the service holds the MLA pages only
    elif order == "mla-between":  # the first MHA server keeps its tiers; the second joins the service
        assert not results["mha-a"]["host_cache"] and results["mha-b"]["host_cache"], results
        assert objects == 16  # 8 MLA + the second MHA server's 8 pages
    else:  # the service runs: both join it and share their model's pages
        assert results["mha-a"]["host_cache"] and results["mha-b"]["host_cache"], results
        assert objects == 16  # 8 MLA + 8 MHA pages, the second MHA server's set found them stored


def test_a_second_server_with_the_same_ssd_path_takes_its_own_directory_and_says_so(
    host_cache: PrivateHostCache, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process (a real ``flock`` holding the first rank directory's lock, as a running
    server's engine does) has the directory: this one takes ``-1`` and says so. An engine of this
    same process still closing is waited for instead (tests/sglang/test_ssd_tier.py)."""
    config = validate_config(host_cache.extra(host_cache="off"))
    build_client_store(config, "rank0_0_0_0", False).close()  # the first server's directory, made
    lock = host_cache.ssd_dir / "rank0_0_0_0" / LOCK_NAME
    holder = subprocess.Popen(["flock", "--exclusive", str(lock), "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "--nonblock", str(lock), "true"]).returncode == 0:
            assert time.monotonic() < deadline, "the other process did not take the lock"
            time.sleep(0.05)
        caplog.set_level(logging.WARNING)
        second = build_client_store(config, "rank0_0_0_0", False)  # was SsdInUseError
        try:
            assert (host_cache.ssd_dir / "rank0_0_0_0-1").is_dir()
            [said] = [
                r.getMessage() for r in caplog.records if "is in use by another process" in r.getMessage()
            ]
            assert str(host_cache.ssd_dir / "rank0_0_0_0") in said and "rank0_0_0_0-1" in said, said
            page = np.arange(4096, dtype=np.uint8)
            assert second.put_batch(["p"], [[memoryview(page)]]) == [True]
            out = np.zeros(4096, dtype=np.uint8)
            assert second.get_batch_into(["p"], [[memoryview(out)]]) == [True] and bytes(out) == bytes(page)
        finally:
            second.close()
    finally:
        holder.kill()
        holder.wait()
