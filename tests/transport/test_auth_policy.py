"""Issue 8, item 8: an empty secret no longer turns authentication off without a word.

- A node whose ``node.host`` reaches beyond loopback refuses to start without a shared secret
  (exit 2, the message names the keys), unless ``node.allow_unauthenticated: true``; then it
  warns at every start. These tests never listen beyond loopback: the node's port is held on
  127.0.0.1 by the test, so even a node that passed the check could not bind the wildcard.
- On loopback a node without a secret still runs (same-host use needs no secret).
- A client without a secret refuses to reach a node beyond loopback (before any packet), unless
  ``tiers.remote.allow_unauthenticated: true``; then it tries, with a warning.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from transport_procs import NodeProc, node_command, node_env

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_remote
from hicache_mooncake.transport import ClientOptions, NodeClient

pytestmark = pytest.mark.integration
FAR = "203.0.113.7"  # TEST-NET-3: beyond loopback, routed nowhere


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port this test listens on at 127.0.0.1: nobody can bind 0.0.0.0 on it meanwhile."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        yield int(s.getsockname()[1])


def run_node(
    tmp: Path, node: dict[str, object], secret: str | None = None
) -> subprocess.CompletedProcess[str]:
    cfg = tmp / "node.yaml"
    cfg.write_text(yaml.safe_dump({"node": node}))
    return subprocess.run(node_command(cfg), capture_output=True, text=True, timeout=60, env=node_env(secret))


@pytest.mark.parametrize("source", ["no_env", "empty_secret_file"])
def test_a_node_beyond_loopback_refuses_to_start_without_a_secret(
    tmp_path: Path, shm_dir: Path, held_port: int, source: str
) -> None:
    node: dict[str, object] = {"host": "0.0.0.0", "port": held_port, "shm_dir": str(shm_dir)}
    if source == "empty_secret_file":
        (tmp_path / "secret").write_text("\n")
        node["secret_file"] = str(tmp_path / "secret")
    res = run_node(tmp_path, node)
    assert res.returncode == 2, res.stderr
    assert "node.host '0.0.0.0' is reachable beyond loopback" in res.stderr
    assert "node.allow_unauthenticated: true" in res.stderr
    assert ("node.secret_file" if source == "empty_secret_file" else "$HICACHE_NODE_SECRET") in res.stderr
    assert list(shm_dir.iterdir()) == []  # refused before anything was allocated


def test_allow_unauthenticated_warns_at_every_start(tmp_path: Path, shm_dir: Path, held_port: int) -> None:
    node = {"host": "0.0.0.0", "port": held_port, "shm_dir": str(shm_dir), "allow_unauthenticated": True}
    for _ in range(2):
        res = run_node(tmp_path, node)
        assert "WITHOUT a shared secret (node.allow_unauthenticated: true)" in res.stderr
        # the check passed; the bind then fails on the port the test holds (exit 2, no traceback)
        assert res.returncode == 2 and "Address already in use" in res.stderr
        assert "Traceback" not in res.stderr
    # with a secret there is nothing to warn about
    res = run_node(tmp_path, node, secret="s3cret")
    assert "WITHOUT a shared secret" not in res.stderr and "Address already in use" in res.stderr


def test_a_loopback_node_runs_without_a_secret(make_node: Callable[..., NodeProc]) -> None:
    node = make_node("open", secret=None)
    c = NodeClient("127.0.0.1", node.port, ClientOptions(timeout_s=2.0))
    try:
        assert c.put_batch([("k", [memoryview(b"v" * 64)])]) == [True]
    finally:
        c.close()


def test_a_client_without_a_secret_refuses_a_node_beyond_loopback(caplog: pytest.LogCaptureFixture) -> None:
    refused = NodeClient(FAR, 9, ClientOptions(timeout_s=1.0, connect_timeout_s=0.3))
    t0 = time.monotonic()
    assert refused.put_batch([("k", [memoryview(b"v" * 64)])]) == [False]
    assert time.monotonic() - t0 < 0.25  # refused before connecting
    assert refused.counters["auth_errors"] == 1 and refused.counters["unavailable"] == 0
    assert "tiers.remote.allow_unauthenticated" in caplog.text
    caplog.clear()
    allowed = NodeClient(
        FAR, 9, ClientOptions(timeout_s=1.0, connect_timeout_s=0.3, allow_unauthenticated=True)
    )
    with caplog.at_level(logging.WARNING):
        assert allowed.put_batch([("k", [memoryview(b"v" * 64)])]) == [False]
    assert allowed.counters["auth_errors"] == 0 and allowed.counters["unavailable"] == 1  # it tried
    assert "WITHOUT a shared secret" in caplog.text
    refused.close()
    allowed.close()


@pytest.mark.parametrize("allow", [False, True])
def test_the_yaml_key_reaches_the_remote_tier(monkeypatch: pytest.MonkeyPatch, allow: bool) -> None:
    monkeypatch.delenv("HICACHE_NODE_SECRET", raising=False)
    cfg = validate_config(
        {
            "tiers": {
                "remote": {
                    "enabled": True,
                    "connect_timeout_s": 0.3,
                    "timeout_s": 1.0,
                    "allow_unauthenticated": allow,
                }
            },
            "metadata": {"backend": "embedded", "nodes": [{"node_id": "far", "host": FAR, "port": 9}]},
        }
    )
    tier = build_remote(cfg, "rank0")
    assert tier is not None
    try:
        assert tier.contains_batch(["k"]) == [False]
        counters = tier.provider.client.stats()["nodes"]["far"]["client"]  # type: ignore[attr-defined]
        assert (counters.get("auth_errors", 0) > 0) is not allow
        assert (counters.get("unavailable", 0) > 0) is allow
    finally:
        tier.close()
