"""The redis metadata backend against a real redis-server: TTL membership and outage."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hicache_mooncake.transport.errors import MetadataUnavailable
from hicache_mooncake.transport.metadata import MetadataConfig, NodeInfo, make_metadata
from hicache_mooncake.transport.metadata.redis_backend import RedisMetadata

pytestmark = pytest.mark.integration


def test_membership_and_outage(redis_server: Any) -> None:
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
        redis_server.stop()
        t0 = time.monotonic()
        with pytest.raises(MetadataUnavailable):
            md.live_nodes()
        assert time.monotonic() - t0 < 1.0
        assert not md.ping()
    finally:
        md.close()
        md2.close()
