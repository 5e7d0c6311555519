"""The redis metadata backend against a real redis-server: TTL membership, leases, fencing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hicache_mooncake.transport.errors import MetadataUnavailable
from hicache_mooncake.transport.metadata import LeaderLease, MetadataConfig, NodeInfo, make_metadata
from hicache_mooncake.transport.metadata.redis_backend import RedisMetadata

pytestmark = pytest.mark.integration


def test_membership_leases_and_outage(redis_server: Any) -> None:
    md = make_metadata(MetadataConfig(backend="redis", url=redis_server.url, namespace="m", timeout_s=0.3))
    md2 = RedisMetadata(redis_server.url, "m", 0.3)
    try:
        md.register_node(
            NodeInfo("a", "127.0.0.1", 1, capacity=10, epoch=5, shm_path="/dev/shm/x"), ttl_s=0.2
        )
        md.register_node(NodeInfo("b", "127.0.0.1", 2), ttl_s=5)
        assert [n.node_id for n in md2.live_nodes()] == ["a", "b"]
        assert md2.live_nodes()[0].shm_path == "/dev/shm/x"
        time.sleep(0.3)
        assert [n.node_id for n in md2.live_nodes()] == ["b"]
        md.deregister_node("b")
        assert md2.live_nodes() == []
        l1, l2 = LeaderLease(md, "coord", "x", 200), LeaderLease(md2, "coord", "y", 200)
        t1 = l1.try_acquire()
        assert t1 is not None and l2.try_acquire() is None
        assert l1.try_acquire() == t1
        assert md2.leader("coord") == ("x", t1)
        l1.release()
        t2 = l2.try_acquire()
        assert t2 is not None and t2 > t1
        redis_server.stop()
        t0 = time.monotonic()
        with pytest.raises(MetadataUnavailable):
            md.live_nodes()
        assert time.monotonic() - t0 < 1.0
        assert l2.try_acquire() is None and not md.ping()
    finally:
        md.close()
        md2.close()
