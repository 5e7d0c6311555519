"""Mooncake's master HA under our backend: two ``mooncake_master --enable_ha`` elect a leader
through etcd (the pinned wheel's masters have etcd and k8s HA backends, not Redis); the clients
(``master: etcd://...``) find the leader there. Killing the leader: calls are misses within the
timeout, never exceptions; the standby takes over and both clients follow it by themselves."""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import TIMEOUT_S
from mooncake_procs import wait_until

pytestmark = pytest.mark.integration
N = 8
SLACK_S = 1.5


def test_leader_killed_the_standby_takes_over_and_the_clients_follow(ha_cluster: dict[str, Any]) -> None:
    a, b = ha_cluster["a"], ha_cluster["b"]
    before = a.call({"op": "set", "tag": "pre", "n": N, "seed": 11})
    assert before["ok"] == [True] * N
    got = b.call({"op": "get", "tag": "pre", "n": N})
    assert got["ok"] == [True] * N and got["digests"] == before["digests"]

    ha_cluster["leader"].kill()
    during = b.call({"op": "get", "tag": "never-stored", "n": N})
    assert during["ok"] == [False] * N
    assert during["elapsed"] < TIMEOUT_S + SLACK_S and during["exists_elapsed"] < TIMEOUT_S + SLACK_S
    ha_cluster["standby"].wait_role("serving")  # elected, warmed up

    start = time.monotonic()
    put: dict[str, Any] = {}

    def a_stores() -> bool:
        put.update(a.call({"op": "set", "tag": f"post{time.monotonic_ns()}-", "n": N, "seed": 12}))
        stats = a.call({"op": "stats"})["tiers"]["remote"]
        return not stats["guard"]["open"] and stats["calls"].get("put_stored", 0) >= 2 * N

    assert wait_until(a_stores, 60, interval=0.5)
    after = a.call({"op": "set", "tag": "post", "n": N, "seed": 13})
    got_after: dict[str, Any] = {}

    def b_reads() -> bool:
        got_after.update(b.call({"op": "get", "tag": "post", "n": N}))
        return bool(got_after["ok"] == [True] * N)

    assert wait_until(b_reads, 60, interval=0.5)
    assert got_after["digests"] == after["digests"]
    assert time.monotonic() - start < 60
    # detaching the storage backend (SGLang's admin API) returns within the deadline: closing
    # an HA client joins its leader watch, up to 30 s with the GIL held, freezing SGLang
    assert b.call({"op": "close"})["close_s"] < TIMEOUT_S + SLACK_S
