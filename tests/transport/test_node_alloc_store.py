"""Issue 48, item 6, on the node's store itself (in-process, no server): ``ServedStore.fits``, the
rule the node applies before every reservation, is exactly the largest slot of the arena. Above
it nothing can ever be reserved (the node refuses without asking the store, so without evicting);
at it the store reserves. It agrees with what the node announces to its clients
(``NodeConfig.max_object_bytes``, ``NodeInfo.max_object``), by which they cut larger pages."""

from __future__ import annotations

import time

import pytest

from hicache_mooncake.store_builder import build_node_store
from hicache_mooncake.transport.node.config import NodeConfig
from hicache_mooncake.transport.node.served_store import RESERVED_NEW
from hicache_mooncake.transport.wire import SetHint


@pytest.mark.parametrize(
    ("capacity", "slab"), [(16 << 20, 4 << 20), (8 << 20, 64 << 20)], ids=["slabs", "capped"]
)
def test_fits_is_the_largest_slot_and_what_the_node_announces(capacity: int, slab: int) -> None:
    cfg = NodeConfig(capacity=capacity, slab_size=slab, shm=False, max_payload=1 << 30)
    store = build_node_store(cfg, None)
    try:
        largest = cfg.max_object_bytes
        assert store.fits(largest)
        assert not store.fits(largest + 1)
        assert not store.fits(capacity + 1)
        assert not store.fits(2**64 - 1)
        owner = object()
        [status] = store.reserve([("largest", largest, 0)], owner, SetHint(), time.monotonic() + 2)["status"]
        assert status == RESERVED_NEW
        assert store.stats()["pending"] == 1
        assert store.release_owner(owner) == 1
    finally:
        store.close()
