"""``clear`` is a barrier for the served arena's write-through pool copies too (issue 48, item 1
of the follow-ups): a page a client committed into the host cache before a clear is not copied
into a write-through pool after it.

The commit is held between its DRAM publish and its pool write (a hook around the real pool
tier's ``contains_batch``, released by an event; the pool is a real memory-node server on
loopback, in this process), a real ``clear`` runs meanwhile, then the commit finishes: the pool
must not hold the page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from transport_procs import SECRET

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_node_store, build_remote
from hicache_mooncake.tiers.dram_tier import DramTier, Reservation
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.policy.contexts import set_contexts
from hicache_mooncake.tiers.tier import Tier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore
from hicache_mooncake.transport import NodeConfig, NodeServer

PAGE = 64 << 10
MiB = 1 << 20
HOLD_S = 10.0


def remote_pool(node: NodeServer) -> Tier:
    cfg = validate_config(
        {
            "tiers": {"remote": {"enabled": True, "timeout_s": 5.0, "write_through": True}},
            "metadata": {
                "backend": "embedded",
                "nodes": [{"node_id": "n0", "host": node.host, "port": node.port}],
            },
        }
    )
    tier = build_remote(cfg, "rank0")
    assert tier is not None
    return tier


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[TieredStore]:
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node_cfg = NodeConfig(port=0, capacity=16 * MiB, slab_size=MiB, shm=False)
    node = NodeServer(node_cfg, lambda spec: build_node_store(node_cfg, spec))
    node.start()
    s = TieredStore(
        [DramTier(4 * MiB, MiB, prefault=False), remote_pool(node)],
        lambda: make_policy("lru"),
        StoreOptions(timeout_s=5.0),
    )
    yield s
    s.close()
    node.drain(2)


def reserved(store: TieredStore, key: str) -> tuple[Reservation, Any]:
    (ctx,) = set_contexts([key], 0, None, [PAGE])
    (res,) = store.served.reserve_batch([key], [ctx])
    assert isinstance(res, Reservation)
    res.body[:] = np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8)
    return res, ctx


def test_a_commit_held_before_its_pool_copy_copies_nothing_after_a_clear(store: TieredStore) -> None:
    (pool,) = store.pools
    assert pool.write_through
    res, ctx = reserved(store, "c0")
    held, release = threading.Event(), threading.Event()
    real = pool.contains_batch

    def held_contains(keys: Any) -> Any:
        if threading.current_thread().name == "held-commit" and not release.is_set():
            held.set()
            release.wait(HOLD_S)  # published in DRAM; the pool copy is next
        return real(keys)

    pool.contains_batch = held_contains  # type: ignore[method-assign]
    result: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: result.update(ok=store.served.commit_batch([res], [ctx])), name="held-commit"
    )
    t.start()
    assert held.wait(HOLD_S)
    store.clear()
    release.set()
    t.join(HOLD_S)
    assert not t.is_alive()
    del pool.contains_batch
    assert result["ok"] == [True]  # committed before the clear: fine
    assert pool.contains_batch(["c0"]) == [False]  # ... but never copied to the pool after it
    assert store.dram is not None and not store.dram.contains("c0")
    assert store.counts["pool_writes_skipped_clear"] == 1
    # a commit after the clear is copied as usual
    res2, ctx2 = reserved(store, "c1")
    assert store.served.commit_batch([res2], [ctx2]) == [True]
    assert pool.contains_batch(["c1"]) == [True]
