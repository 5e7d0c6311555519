"""Sidecar objects (Mamba states, ...) larger than a local tier holds are cut into chunks of at most
``max_object_bytes(config)``: every such chunk must fit every local tier the store builds from that
config, a served arena's (host cache: every slot carries an object header) included, or the state
is never stored at all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ops_helpers import small_config

from hicache_mooncake.object_split import chunk_count, max_object_bytes, split_parts
from hicache_mooncake.store_builder import build_store
from hicache_mooncake.tiers.dram_tier import DramTier


@pytest.mark.parametrize("ssd", [True, False])
def test_a_chunk_of_max_object_bytes_fits_every_local_tier_served_or_not(tmp_path: Path, ssd: bool) -> None:
    cfg = small_config(tmp_path, ssd=ssd)  # 1 MiB slabs (and 1 MiB regions)
    limit = max_object_bytes(cfg)
    store = build_store(cfg)
    served = DramTier(cfg.tiers.dram.capacity, cfg.tiers.dram.slab_size, prefault=False, object_headers=True)
    try:
        assert store.dram is not None and (store.ssd is not None) == ssd
        for tier in (store.dram, store.ssd, served):
            assert tier is None or tier.fits(limit), tier.name
        # a state of exactly one slab (power-of-two shapes make such sizes) is cut, and each
        # chunk lands in the served arena
        state = np.ones(int(cfg.tiers.dram.slab_size), np.uint8)
        n = chunk_count(state.nbytes, limit)
        chunks = split_parts([memoryview(state)], n)
        assert n == 2 and all(served.fits(sum(p.nbytes for p in c)) for c in chunks)
    finally:
        store.close()
        served.close()


@pytest.mark.parametrize(
    ("slab", "capacity"), [(64 << 10, 1 << 20), (4 << 20, 2 << 20)], ids=["slab", "capped"]
)
def test_a_pool_clients_chunks_fit_the_node_store_its_node_section_describes(
    tmp_path: Path, slab: int, capacity: int
) -> None:
    """With the pool on (nodes), a client cuts pages to what a node built from the same file's
    ``node:`` section stores: the largest chunk lands in that node's store, one byte more does not
    (a slab capped at the node's capacity included)."""
    from hicache_mooncake.config.loader import validate_config
    from hicache_mooncake.store_builder import build_node_store
    from hicache_mooncake.transport.node.config import NodeConfig

    data = small_config(tmp_path, ssd=False).model_dump()
    data["tiers"]["dram"]["slab_size"] = 4 << 20
    cfg = validate_config(data)
    data["tiers"]["remote"] = {"enabled": True}
    data["node"] = {"slab_size": slab, "capacity": capacity}
    pool_cfg = validate_config(data)
    limit = max_object_bytes(pool_cfg)
    assert limit < max_object_bytes(cfg)  # the node's slab is the smaller limit here
    node = build_node_store(NodeConfig(slab_size=slab, capacity=capacity), None)
    try:
        dram = node.store.dram
        assert dram is not None and dram.fits(limit) and not dram.fits(limit + 1)
    finally:
        node.close()
    no_node_section = data | {"node": None}
    assert max_object_bytes(validate_config(no_node_section)) == min(
        max_object_bytes(cfg), NodeConfig().max_object_bytes
    )  # the nodes' default slab


def test_chunk_keys_and_flags_keep_page_order_and_a_page_needs_every_chunk() -> None:
    from hicache_mooncake.object_split import chunked, split_pages, whole

    assert chunked(["a", "b"], 1) == ["a", "b"]
    assert chunked(["a", "b"], 3) == ["a#0of3", "a#1of3", "a#2of3", "b#0of3", "b#1of3", "b#2of3"]
    assert whole([True, True, True, False, True, True], 3) == [True, False]
    assert whole([True, False], 1) == [True, False]
    pages = [[memoryview(bytes(range(10))), memoryview(bytes(range(10, 15)))], [memoryview(b"xyz")]]
    cut = split_pages(pages, 2)
    assert len(cut) == 4
    assert b"".join(bytes(p) for c in cut[:2] for p in c) == bytes(range(15))
    assert [sum(p.nbytes for p in c) for c in cut] == [8, 7, 2, 1]
    assert split_pages(pages, 1) == pages
