"""A memory node's store makes room the way the in-process store does (issue 48 follow-ups):

- item 4: a page of a size class the node's arena has no slab for empties one whole slab of
  another size (it was refused after least recently used pages of any size were evicted);
- item 5: a lookup for a page held by a pool tier, with a size no DRAM slot holds (the size is
  the client's), evicts nothing (it emptied DRAM before).

Real memory-node servers on loopback (in this process), a real client (the remote pool tier)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from transport_procs import SECRET

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_node_store, build_remote
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT, make_policy
from hicache_mooncake.tiers.policy.contexts import set_contexts
from hicache_mooncake.tiers.tier import Tier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore
from hicache_mooncake.transport import NodeConfig, NodeServer

KiB, MiB = 1 << 10, 1 << 20
SMALL = 64 * KiB


@pytest.fixture
def pool_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A memory node (a real server on loopback, in this process) and a client of it."""
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    made: list[tuple[NodeServer, Tier]] = []

    def make(capacity: int = 64 * MiB, slab_size: int = 4 * MiB) -> Tier:
        node_cfg = NodeConfig(port=0, capacity=capacity, slab_size=slab_size, shm=False)
        node = NodeServer(node_cfg, lambda spec: build_node_store(node_cfg, spec))
        node.start()
        cfg = validate_config(
            {
                "tiers": {"remote": {"enabled": True, "timeout_s": 5.0}},
                "metadata": {
                    "backend": "embedded",
                    "nodes": [{"node_id": f"n{len(made)}", "host": node.host, "port": node.port}],
                },
            }
        )
        tier = build_remote(cfg, "rank0")
        assert tier is not None
        made.append((node, tier))
        return tier

    yield make
    for node, tier in made:
        tier.close()
        node.drain(2)


def item(key: str, nbytes: int) -> tuple[str, list[memoryview], Any]:
    data = np.frombuffer(key.encode().ljust(nbytes, b"."), dtype=np.uint8)
    return key, [memoryview(data)], DEFAULT_CONTEXT._replace(size=nbytes)


def test_a_larger_page_on_a_full_node_empties_one_slab_and_is_stored(pool_of: Any) -> None:
    pool = pool_of(capacity=16 * MiB, slab_size=4 * MiB)
    keys = [f"p{i:03d}" for i in range(240)]  # 64 KiB + its header: 60 per 4 MiB slab, 4 slabs
    for i in range(0, len(keys), 40):
        assert all(pool.put_batch([item(k, SMALL) for k in keys[i : i + 40]]))
    assert sum(pool.contains_batch(keys)) == 240
    assert pool.put_batch([item("big", MiB)]) == [True]  # refused before (no 1 MiB slot anywhere)
    buf = np.zeros(MiB, np.uint8)
    assert pool.get_batch_into([("big", [memoryview(buf)], DEFAULT_CONTEXT._replace(size=MiB))]) == [True]
    assert bytes(buf[:3]) == b"big"
    held = sum(pool.contains_batch(keys))
    assert 240 - 60 - 16 <= held <= 240 - 60  # one slab emptied (and at most the bytes charged)


def test_a_lookup_with_a_size_no_slot_holds_evicts_nothing(pool_of: Any) -> None:
    pool = pool_of()
    store = TieredStore(
        [DramTier(4 * MiB, MiB, prefault=False), pool],
        lambda: make_policy("lru"),
        StoreOptions(timeout_s=5.0),
    )
    try:
        keys = [f"d{i:02d}" for i in range(32)]
        assert all(store.put_batch(keys, [item(k, SMALL)[1] for k in keys]))
        assert pool.put_batch([item("far", SMALL)]) == [True]  # only the pool holds it
        dram = store.dram
        assert dram is not None and all(dram.contains_batch(keys)) and not dram.contains("far")
        assert store.served.locate_batch(["far"], [2**64 - 1]) == [None]  # the client's size
        assert all(dram.contains_batch(keys))  # nothing was evicted for it
        (ctx,) = set_contexts(["huge"], 0, None, [2**64 - 1])
        assert store.served.reserve_batch(["huge"], [ctx]) == [False]
        assert all(dram.contains_batch(keys))
        assert dram.stats()["rejected_too_large"] >= 2
        located = store.served.locate_batch(["far"], [SMALL])  # its real size is still served
        assert located[0] is not None and dram.contains("far")
    finally:
        store.close()
