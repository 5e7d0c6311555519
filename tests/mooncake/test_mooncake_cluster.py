"""Our backend on a real Mooncake Store cluster: ``mooncake_master``, two segment holders
(``mooncake_client``) and two separate SGLang-side processes, each with its own backend built by
SGLang's factory from ``configs/mooncake.yaml`` (replica_num 2, P2P handshake metadata), all on
loopback inside a private network namespace. Each test leaves the cluster as it found it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import TIMEOUT_S
from mooncake_procs import wait_until

pytestmark = pytest.mark.integration
N = 8
SLACK_S = 1.5  # scheduling noise on a shared 2-core machine, on top of tiers.remote.timeout_s


def test_a_page_set_by_one_client_is_found_and_byte_checked_by_the_other(cluster: dict[str, Any]) -> None:
    a, b = cluster["a"], cluster["b"]
    put = a.call({"op": "set", "tag": "x", "n": N, "seed": 1})
    assert put["ok"] == [True] * N
    got = b.call({"op": "get", "tag": "x", "n": N})
    assert got["exists"] == N  # b's local DRAM is empty: found in the pool, one batch_is_exist
    assert got["ok"] == [True] * N
    assert got["digests"] == put["digests"]
    stats = b.call({"op": "stats"})["tiers"]
    remote = stats["remote"]
    assert remote["provider"] == "mooncake" and remote["connected"]
    assert remote["client"]["direct_gets"] >= N and remote["client"].get("staged_gets", 0) == 0  # zero copy
    assert remote["registered_bytes"] > 0
    assert stats["dram"]["entries"] == N  # the pool hits were promoted into b's local DRAM


def test_a_hybrid_models_kv_and_mamba_state_are_shared_through_mooncake(cluster: dict[str, Any]) -> None:
    """SGLang's v2 interface on the Mooncake provider: KV pages and the Mamba state of a hybrid
    model set by one process are found by the other (restorable prefix: the whole chain, since the
    state of its last page is there) and land byte-exact in its host pools."""
    a, b = cluster["a"], cluster["b"]
    put = a.call({"op": "hybrid_set", "tag": "hy", "n": 4, "seed": 31})
    assert put["ok"] == [True] * 4 and put["state_ok"] == [True], put
    got = b.call({"op": "hybrid_get", "tag": "hy", "n": 4})
    assert got["kv_hit_pages"] == 4 and got["restorable"] == [4], got
    assert got["ok"] == [True] * 4 and got["state_ok"] == [True]
    assert got["digests"] == put["digests"] and got["state_digest"] == put["state_digest"]
    missing = b.call({"op": "hybrid_get", "tag": "never", "n": 4})
    assert missing["kv_hit_pages"] == 0 and missing["ok"] == [False] * 4


def test_pages_outside_the_registered_host_pool_are_staged_and_still_correct(cluster: dict[str, Any]) -> None:
    """SGLang's legacy path hands over fresh tensors: they go through Mooncake's own staging buffer
    (``put_parts`` / ``get_buffer``), not the zero-copy calls, and still round-trip byte-exact."""
    a, b = cluster["a"], cluster["b"]
    put = a.call({"op": "legacy_set", "tag": "flat", "n": 3, "seed": 6})
    assert put["stored"] is True
    got = b.call({"op": "legacy_get", "tag": "flat", "n": 3})
    assert got["ok"] == [True] * 3 and got["digests"] == put["digests"]
    assert a.call({"op": "stats"})["tiers"]["remote"]["client"]["staged_puts"] == 3
    assert b.call({"op": "stats"})["tiers"]["remote"]["client"]["staged_gets"] == 3


def test_master_killed_mid_storm_gives_misses_within_the_timeout_and_no_exception(
    cluster: dict[str, Any],
) -> None:
    a, b, master = cluster["a"], cluster["b"], cluster["master"]
    local = b.call({"op": "get", "tag": "x", "n": N})  # in b's DRAM since the first test (promoted)
    assert local["ok"] == [True] * N
    storm: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: storm.update(b.call({"op": "storm", "seconds": 6, "n": N, "local": "x"}))
    )
    runner.start()
    time.sleep(1.5)
    master.kill()
    runner.join(120)
    try:
        assert storm["errors"] == []  # nothing escaped the backend
        assert storm["max_call_s"] < TIMEOUT_S + SLACK_S  # never waited past tiers.remote.timeout_s
        assert storm["local_ok"] == storm["local_pages"]  # the local tier kept serving throughout
        assert storm["set_ok"] + storm["get_ok"] > 0  # the pool served before the kill...
        after = a.call({"op": "get", "tag": "x", "n": N})  # ...and a (DRAM has them) still serves
        assert after["ok"] == [True] * N
        missing = a.call({"op": "get", "tag": "never-stored", "n": N})
        assert missing["ok"] == [False] * N
        assert missing["elapsed"] < TIMEOUT_S + SLACK_S and missing["exists_elapsed"] < TIMEOUT_S + SLACK_S
        guard = a.call({"op": "stats"})["tiers"]["remote"]["guard"]
        assert guard["open"] and guard["trips"] >= 1  # misses answered without calling Mooncake
    finally:
        master.start()
        assert wait_until(lambda: all(_pool_works(c, f"heal{time.monotonic_ns()}") for c in (a, b)), 30)


def test_master_restarted_and_the_clients_rejoin(cluster: dict[str, Any]) -> None:
    a, b, master = cluster["a"], cluster["b"], cluster["master"]
    master.kill()
    assert a.call({"op": "set", "tag": "during", "n": N, "seed": 2})["ok"] == [True] * N  # DRAM took it
    master.start()
    start = time.monotonic()
    assert wait_until(lambda: _pool_works(a, f"rejoin{time.monotonic_ns()}-"), 30)
    put = a.call({"op": "set", "tag": "after", "n": N, "seed": 3})
    assert put["ok"] == [True] * N
    got: dict[str, Any] = {}

    def b_reads_it() -> bool:  # b made no call during the outage: it notices and rejoins now
        got.update(b.call({"op": "get", "tag": "after", "n": N}))
        return bool(got["ok"] == [True] * N)

    assert wait_until(b_reads_it, 30)
    assert got["digests"] == put["digests"]
    assert time.monotonic() - start < 30
    stats = a.call({"op": "stats"})["tiers"]["remote"]
    assert not stats["guard"]["open"] and stats["guard"]["probes"] >= 1


def test_replica_2_with_a_segment_holder_killed_still_serves_every_page(cluster: dict[str, Any]) -> None:
    a, b, holders, master = cluster["a"], cluster["b"], cluster["holders"], cluster["master"]
    # Mooncake places as many replicas as there are segments (up to replica_num): after the master
    # restarts of the tests above, wait until both holders have mounted theirs again, or a page
    # could have its only copy on the holder killed below.
    assert wait_until(lambda: len(master.segments()) == 2, 30), master.segments()
    put = a.call({"op": "set", "tag": "rep", "n": 16, "seed": 4})
    assert put["ok"] == [True] * 16
    holders[0].kill()
    try:
        # Mooncake reads the first complete replica; once the master drops the dead holder's
        # segment (--client_ttl=2) every page is served from the surviving copy. Until then a read
        # of a lost copy is a miss, never an exception and never wrong bytes.
        outcomes: list[dict[str, Any]] = []

        def all_served() -> bool:
            got = b.call({"op": "get", "tag": "rep", "n": 16})
            outcomes.append(got)
            return got["ok"] == [True] * 16

        served = wait_until(all_served, 20, interval=0.5)
        remote = b.call({"op": "stats"})["tiers"]["remote"]
        assert served, f"last get {outcomes[-1]['ok']}; segments {master.segments()}; b's pool {remote}"
        assert outcomes[-1]["digests"] == put["digests"]
        for got in outcomes:
            for ok, have, want in zip(got["ok"], got["digests"], put["digests"], strict=True):
                assert not ok or have == want
            assert got["elapsed"] < TIMEOUT_S + SLACK_S
    finally:
        holders[0].start()


def test_another_deployment_sharing_the_cluster_never_sees_these_pages(cluster: dict[str, Any]) -> None:
    """Keys are namespaced (model, layout digest, tenant, rank) exactly as in our other tiers."""
    a, b = cluster["a"], cluster["b"]
    assert a.call({"op": "set", "tag": "ns", "n": 4, "seed": 5})["ok"] == [True] * 4
    assert b.call({"op": "get", "tag": "ns", "n": 4})["exists"] == 4
    assert b.call({"op": "exists_as", "tenant": "other", "tag": "ns", "n": 4})["exists"] == 0


def _pool_works(agent: Any, tag: str) -> bool:
    """A set of fresh pages stored in the pool (not only in local DRAM) and read back."""
    before = agent.call({"op": "stats"})["tiers"]["remote"]["calls"].get("put_stored", 0)
    agent.call({"op": "set", "tag": tag, "n": 1, "seed": 9})
    after = agent.call({"op": "stats"})["tiers"]["remote"]["calls"].get("put_stored", 0)
    return bool(after > before)
