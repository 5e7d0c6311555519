"""The remote tier over ``engine: rdma`` (verbs simulator) behind SGLang's own backend factory and
host pool: the host pool is registered once at ``register_mem_pool_host`` and pages move
NIC-to-pool with no copy (issue 9 item 1); an RDMA path that fails to set up costs remote misses
only, local DRAM hits stay hits (item 6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rdma_sim import Fabric
from sglang_helpers import LAYOUTS, SMALL, make_backend, small_extra
from transport_procs import SECRET, NodeProc

from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size


@pytest.fixture
def sim_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Fabric, NodeProc]]:
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    with Fabric(tmp_path / "fabric") as fab:
        node = NodeProc(tmp_path, "n1", None, "t", node={"rdma_device": fab.device}, env=fab.env())
        node.start()
        try:
            yield fab, node
        finally:
            node.stop()


def rdma_extra(port: int, dram: bool = False, **rdma: Any) -> dict[str, Any]:
    extra = small_extra(remote={"enabled": True, "engine": "rdma", "timeout_s": 2.0, "rdma": rdma})
    extra["tiers"]["dram"]["enabled"] = dram
    extra["metadata"] = {"backend": "embedded", "nodes": [{"node_id": "n1", "port": port}]}
    return extra


def keys(n: int, tag: str) -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_host_pool_is_registered_and_pages_move_with_no_copy(
    sim_node: tuple[Fabric, NodeProc], layout: str
) -> None:
    _fab, node = sim_node
    a, host_a = make_backend(layout=layout, extra=rdma_extra(node.port))
    b, host_b = make_backend(layout=layout, extra=rdma_extra(node.port))
    try:
        src = host_a.alloc(8 * PS)
        fill_random_pages(host_a, src, seed=31)
        want = page_snapshot(host_a, src)
        assert a.batch_set_v1(keys(8, layout[:2]), src) == [True] * 8
        dst = host_b.alloc(8 * PS)
        assert b.batch_get_v1(keys(8, layout[:2]), dst) == [True] * 8
        assert all(torch.equal(x, y) for x, y in zip(want, page_snapshot(host_b, dst), strict=True))
        for be in (a, b):
            engine = be.store.tier("remote").provider.client.engine
            assert engine.name == "rdma"
            c = engine.counters
            assert c["registered_bytes"] > 0  # every host pool buffer, at register_mem_pool_host
            assert c["zero_copy_bytes"] > 0
            assert c["bounce_bytes"] % 64 == 0 and c["bounce_bytes"] <= 2 * 8 * 64  # headers only
    finally:
        a.close()
        b.close()


def test_a_remote_path_that_cannot_connect_costs_remote_misses_only(
    sim_node: tuple[Fabric, NodeProc],
) -> None:
    _fab, node = sim_node
    # GID index 0 (RoCE v1) against the node's RoCE v2 GID: every RDMA request is dropped
    be, host = make_backend(extra=rdma_extra(node.port, dram=True, gid_index=0))
    try:
        src = host.alloc(4 * PS)
        fill_random_pages(host, src, seed=32)
        want = page_snapshot(host, src)
        be.batch_set_v1(keys(4, "dh"), src)  # DRAM stores them; the pool does not
        dst = host.alloc(4 * PS)
        assert be.batch_get_v1(keys(4, "dh"), dst) == [True] * 4  # DRAM hits stay hits
        assert all(torch.equal(x, y) for x, y in zip(want, page_snapshot(host, dst), strict=True))
        assert be.batch_exists(keys(4, "none")) == 0
    finally:
        be.close()
