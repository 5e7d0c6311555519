"""``host_cache.*`` keys that size the service's node (what those node limits do is shown by
tests/config_keys/test_node_keys.py and tests/transport/test_flood.py)."""

from __future__ import annotations

from pathlib import Path

from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.host_cache.paths import HostCachePaths
from hicache_mooncake.host_cache.service import node_config


def test_service_node_keys_follow_the_host_cache_section(tmp_path: Path) -> None:
    def node_of(**hc: object):  # type: ignore[no-untyped-def]
        config = validate_config({"host_cache": {"dir": str(tmp_path), **hc}})
        return node_config(config, HostCachePaths.of(config.host_cache))

    default, custom = node_of(), node_of(max_clients=7, connections=40, retry_interval_s=30.0)
    assert (default.max_connections, custom.max_connections) == (1024, 7)  # max_clients
    assert (default.max_handshakes_per_peer, custom.max_handshakes_per_peer) == (32, 80)  # connections
    assert (default.idle_timeout_s, custom.idle_timeout_s) == (60.0, 300.0)  # retry_interval_s
