"""``metrics.host``: a rank's endpoint listens on that address only (127.0.0.1 and 127.0.0.2 are
both loopback on Linux: the one configured answers, the other refuses the connection)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hicache_mooncake.config import validate_config
from hicache_mooncake.metrics.rank import BackendMetrics

LOOPBACKS = ("127.0.0.1", "127.0.0.2")


def answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


@pytest.mark.parametrize("host", LOOPBACKS)
def test_metrics_host_is_the_address_the_endpoint_listens_on(host: str, tmp_path: Path) -> None:
    config = validate_config({"metrics": {"host": host, "port": 0, "discovery_dir": str(tmp_path)}})
    metrics = BackendMetrics(lambda: {})
    port = metrics.serve(config.metrics, lambda: (True, {}))
    try:
        assert {other: answers(other, port) for other in LOOPBACKS} == {h: h == host for h in LOOPBACKS}
    finally:
        metrics.close()
