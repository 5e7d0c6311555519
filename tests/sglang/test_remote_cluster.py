"""Two SGLang-side backends (created by SGLang's factory from the cluster YAML) sharing a pool of
real memory-node processes found through a real redis-server, all on loopback."""

from __future__ import annotations

import time

import pytest
import torch
import yaml
from sglang_helpers import REPO, SMALL, make_backend
from transport_procs import SECRET

from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size


def cluster_extra(redis_url: str, namespace: str, timeout_s: float = 1.0) -> dict:
    extra = yaml.safe_load((REPO / "configs" / "cluster.yaml").read_text())
    extra.pop("node")
    extra["tiers"]["dram"].update({"capacity": "8MiB", "slab_size": "1MiB"})
    extra["tiers"]["remote"].update({"timeout_s": timeout_s})
    extra["metadata"].update(
        {"url": redis_url, "namespace": namespace, "refresh_interval_s": 0.2, "timeout_s": 0.3}
    )
    return extra


def keys(n: int, tag: str = "c") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


@pytest.fixture
def cluster(redis_server, node_factory, monkeypatch):
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    nodes = [node_factory(f"n{i}", redis_server.url, namespace="sg") for i in range(2)]
    extra = cluster_extra(redis_server.url, "sg")
    a, host_a = make_backend(extra=extra)
    b, host_b = make_backend(extra=extra)
    deadline = time.monotonic() + 10
    while any(len(be.store.tier("remote").provider.client.nodes()) < 2 for be in (a, b)):
        assert time.monotonic() < deadline, "clients did not see both nodes"
        time.sleep(0.05)
    yield redis_server, nodes, (a, host_a), (b, host_b)
    a.close()
    b.close()


def test_pages_stored_by_one_instance_are_found_by_another(cluster):
    _redis, nodes, (a, host_a), (b, host_b) = cluster
    src = host_a.alloc(8 * PS)
    fill_random_pages(host_a, src, seed=21)
    want = page_snapshot(host_a, src)
    assert a.batch_set_v1(keys(8), src) == [True] * 8
    assert b.batch_exists(keys(8)) == 8  # not in b's DRAM: found in the pool
    dst = host_b.alloc(8 * PS)
    assert b.batch_get_v1(keys(8), dst) == [True] * 8
    assert all(torch.equal(x, y) for x, y in zip(want, page_snapshot(host_b, dst), strict=True))
    stats = b.tier_stats()["tiers"]
    assert stats["dram"]["entries"] == 8  # promoted into b's local DRAM on the pool hit
    assert stats["remote"]["entries"] == 8 and stats["remote"]["nodes"] == 2


def test_dead_node_means_misses_within_the_timeout(cluster):
    import signal

    _redis, nodes, (a, host_a), (b, host_b) = cluster
    src = host_a.alloc(16 * PS)
    fill_random_pages(host_a, src, seed=22)
    assert all(a.batch_set_v1(keys(16, "d"), src))
    nodes[0].stop(signal.SIGKILL)
    dst = host_b.alloc(16 * PS)
    start = time.monotonic()
    result = b.batch_get_v1(keys(16, "d"), dst)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 + 1.5  # remote.timeout_s plus slack: never a hang
    assert False in result  # the dead node's keys are gone
    assert b.batch_exists(keys(16, "d")) < 16


def test_redis_down_keeps_local_tiers_serving_and_the_pool_rejoins(cluster):
    redis, nodes, (a, host_a), (b, host_b) = cluster
    src = host_a.alloc(4 * PS)
    fill_random_pages(host_a, src, seed=23)
    assert all(a.batch_set_v1(keys(4, "e"), src))
    redis.stop()
    time.sleep(0.6)  # past a refresh: the remote tier detaches
    start = time.monotonic()
    assert a.batch_exists(keys(4, "e")) == 4  # a's DRAM still serves
    dst = host_a.alloc(4 * PS)
    assert a.batch_get_v1(keys(4, "e"), dst) == [True] * 4
    assert all(a.batch_set_v1(keys(4, "f"), src))  # sets land in local DRAM
    assert b.batch_exists(keys(4, "e")) == 0  # b has no local copy and no pool: a miss, fast
    assert time.monotonic() - start < 3.0
    redis.start()
    deadline = time.monotonic() + 15
    while b.batch_exists(keys(4, "e")) < 4:  # nodes re-register by heartbeat, clients rejoin
        assert time.monotonic() < deadline, "the remote tier did not rejoin after Redis came back"
        time.sleep(0.1)


def test_a_hybrid_models_states_are_shared_through_the_pool_with_their_type(
    redis_server, node_factory, monkeypatch
):
    """KV pages and Mamba states stored by one instance are found, typed, and read byte-exact by
    another instance through the memory nodes (the remote tier carries sidecars like KV)."""
    from hybrid_helpers import hybrid_backend, kv_mamba_group, page_hashes, transfer
    from sglang.srt.mem_cache.hicache_storage import PoolName

    from hicache_mooncake.tiers.policy import ObjectType

    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    for i in range(2):
        node_factory(f"h{i}", redis_server.url, namespace="hy")
    extra = cluster_extra(redis_server.url, "hy")
    groups = [kv_mamba_group(), kv_mamba_group()]
    a, b = (hybrid_backend(g, extra=extra) for g in groups)
    deadline = time.monotonic() + 10
    while any(len(be.store.tier("remote").provider.client.nodes()) < 2 for be in (a, b)):
        assert time.monotonic() < deadline, "clients did not see both nodes"
        time.sleep(0.05)
    hashes = page_hashes(4, "y")
    kv_a, mamba_a = groups[0].get_pool(PoolName.KV), groups[0].get_pool(PoolName.MAMBA)
    src, slot = kv_a.alloc(4 * PS), mamba_a.alloc(1)
    fill_random_pages(kv_a, src, seed=31)
    fill_random_pages(mamba_a, slot, seed=32)
    assert a.batch_set_v1(hashes, src) == [True] * 4
    assert a.batch_set_v2([transfer(PoolName.MAMBA, hashes[-1:], slot)]) == {PoolName.MAMBA: [True]}

    hit = b.batch_exists_v2(hashes, [transfer(PoolName.MAMBA, ["x"])])
    assert hit.kv_hit_pages == 4 and hit.restorable_prefix_pages == [4]
    state_key = b.host_pools.get("mamba").keys.key(hashes[-1])
    (ref,) = b.store.tier("remote").provider.client.lookup_batch([state_key])
    assert ref.found and ref.obj_type == ObjectType.MAMBA_STATE
    kv_b, mamba_b = groups[1].get_pool(PoolName.KV), groups[1].get_pool(PoolName.MAMBA)
    dst, dst_slot = kv_b.alloc(4 * PS), mamba_b.alloc(1)
    assert b.batch_get_v1(hashes, dst) == [True] * 4
    assert b.batch_get_v2([transfer(PoolName.MAMBA, hashes[-1:], dst_slot)]) == {PoolName.MAMBA: [True]}
    assert torch.equal(page_snapshot(mamba_b, dst_slot)[0], page_snapshot(mamba_a, slot)[0])
    assert all(
        torch.equal(x, y) for x, y in zip(page_snapshot(kv_a, src), page_snapshot(kv_b, dst), strict=True)
    )
    a.close()
    b.close()


@pytest.mark.parametrize("local_dram", [True, False], ids=["dram+pool", "pool_only"])
def test_a_page_larger_than_a_nodes_slab_is_shared_in_chunks(
    redis_server, node_factory, monkeypatch, local_dram
):
    """A KV page larger than the largest object a memory node stores (``node.slab_size``) is cut
    into chunks that fit it, as for a local tier: before, a pool-only client never stored one
    such page, and a client with a larger local slab stored them locally but never shared them."""
    from hicache_mooncake.tools.sglang_harness import PoolShape

    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    for i in range(2):
        node_factory(f"s{i}", redis_server.url, namespace="sl", slab_size="64KiB")
    extra = cluster_extra(redis_server.url, "sl")
    extra["node"] = {"slab_size": "64KiB"}  # one file for nodes and clients: they cut alike
    if not local_dram:
        extra["tiers"]["dram"] = {"enabled": False}
    shape = PoolShape(page_size=16, layers=3, heads=4, head_dim=128, device_tokens=1024)
    a, host_a = make_backend(extra=extra, shape=shape)
    b, host_b = make_backend(extra=extra, shape=shape)
    try:
        deadline = time.monotonic() + 10
        while any(len(be.store.tier("remote").provider.client.nodes()) < 2 for be in (a, b)):
            assert time.monotonic() < deadline, "clients did not see both nodes"
            time.sleep(0.05)
        assert a.host_pools.kv.page_nbytes == 96 << 10  # above the 64 KiB slab: 2 chunks
        ps = shape.page_size
        src = host_a.alloc(6 * ps)
        fill_random_pages(host_a, src, seed=41)
        want = page_snapshot(host_a, src)
        ks = keys(6, "L")
        assert a.batch_set_v1(ks, src) == [True] * 6
        assert b.batch_exists(ks) == 6  # b holds nothing locally: every chunk is in the pool
        dst = host_b.alloc(6 * ps)
        assert b.batch_get_v1(ks, dst) == [True] * 6
        assert all(torch.equal(x, y) for x, y in zip(want, page_snapshot(host_b, dst), strict=True))
        assert b.tier_stats()["tiers"]["remote"]["entries"] == 12
    finally:
        a.close()
        b.close()


def test_a_client_cutting_larger_than_its_nodes_says_so_and_sends_nothing_they_refuse(
    redis_server, node_factory, monkeypatch, printed_lines
):
    """A client whose file gives no ``node.slab_size`` (the 64 MiB default) over nodes started with
    64 KiB slabs: its 96 KiB pages stay local, and the operator is told which setting differs."""
    from hicache_mooncake.tools.sglang_harness import PoolShape

    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node_factory("m0", redis_server.url, namespace="mm", slab_size="64KiB")
    extra = cluster_extra(redis_server.url, "mm")
    shape = PoolShape(page_size=16, layers=3, heads=4, head_dim=128, device_tokens=1024)
    a, host_a = make_backend(extra=extra, shape=shape)
    try:
        client = a.store.tier("remote").provider.client
        deadline = time.monotonic() + 10
        while not client.nodes():
            assert time.monotonic() < deadline, "the client did not see the node"
            time.sleep(0.05)
        assert client.nodes()[0].max_object == (64 << 10) - 64
        src = host_a.alloc(4 * shape.page_size)
        fill_random_pages(host_a, src, seed=43)
        assert a.batch_set_v1(keys(4, "M"), src) == [True] * 4  # local DRAM holds them
        remote = a.tier_stats()["tiers"]["remote"]
        assert remote["client"]["too_large"] == 4 and remote["entries"] == 0
        told = printed_lines.matching("stores objects of at most 65472 bytes")
        assert len(told) == 1 and "same node.slab_size" in told[0]
    finally:
        a.close()
