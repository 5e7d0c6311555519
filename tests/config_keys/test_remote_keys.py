"""``tiers.remote.*`` keys that had no test of their own: the real remote tier (``build_store`` /
``build_remote``) against a real node server in this process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.store_builder import build_node_store, build_store
from hicache_mooncake.tiers.pool_providers import make_provider
from hicache_mooncake.tiers.tiered_store import TieredStore
from hicache_mooncake.transport import NodeConfig, NodeServer

SECRET = "key-audit-remote"
MiB = 1 << 20
PAGE = 64 << 10


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeServer]:
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    cfg = NodeConfig(port=0, capacity=32 * MiB, slab_size=MiB, shm=False)
    srv = NodeServer(cfg, lambda spec: build_node_store(cfg, spec))
    srv.start()
    yield srv
    srv.drain(2)


def remote_config(srv: NodeServer, **remote: Any) -> Any:
    return validate_config(
        {
            "tiers": {
                "policy": "lru",
                "dram": {"capacity": "4MiB", "slab_size": "1MiB", "prefault": False},
                "remote": {"enabled": True, "timeout_s": 2.0, **remote},
                "warm": {"enabled": False},
            },
            "metadata": {
                "backend": "embedded",
                "nodes": [{"node_id": "n", "host": srv.host, "port": srv.port}],
            },
        }
    )


def page(key: str) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def get(store: TieredStore, keys: list[str]) -> list[bool]:
    bufs = [np.zeros(PAGE, np.uint8) for _ in keys]
    ok = store.get_batch_into(keys, [[memoryview(b)] for b in bufs])
    assert all(np.array_equal(b, page(k)) for k, b, hit in zip(keys, bufs, ok, strict=True) if hit)
    return ok


@pytest.mark.parametrize(("write_through", "promote_on_hit"), [(True, True), (True, False), (False, True)])
def test_write_through_and_promote_on_hit(
    node: NodeServer, write_through: bool, promote_on_hit: bool
) -> None:
    """``write_through``: a set also reaches the pool (another instance finds it); ``promote_on_hit``:
    a pool hit is copied into this instance's DRAM."""
    cfg = remote_config(node, write_through=write_through, promote_on_hit=promote_on_hit)
    writer, reader = build_store(cfg), build_store(cfg)
    try:
        keys = [f"w{i}" for i in range(4)]
        assert all(writer.put_batch(keys, [[memoryview(page(k))] for k in keys]))
        writer.flush()
        assert get(reader, keys) == [write_through] * 4
        reader.flush()
        promoted = set(reader.dram.keys()) & set(keys)
        assert promoted == (set(keys) if write_through and promote_on_hit else set())
    finally:
        writer.close()
        reader.close()


def test_the_client_secret_comes_from_secret_env_or_secret_file(
    node: NodeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEY_AUDIT_CLIENT_SECRET", "not-the-nodes")
    wrong_file = tmp_path / "wrong"
    wrong_file.write_text("also-not-the-nodes\n")
    right_file = tmp_path / "right"
    right_file.write_text(SECRET + "\n")
    cases: list[tuple[dict[str, Any], bool]] = [
        ({}, True),  # secret_env's default: HICACHE_NODE_SECRET
        ({"secret_env": "KEY_AUDIT_CLIENT_SECRET"}, False),
        ({"secret_file": str(wrong_file)}, False),
        ({"secret_file": str(right_file), "secret_env": "KEY_AUDIT_CLIENT_SECRET"}, True),  # the file wins
    ]
    for n, (remote, works) in enumerate(cases):
        store = build_store(remote_config(node, **remote))
        before = node.requests.get("PUT", 0)
        try:
            assert store.put_batch([f"s{n}"], [[memoryview(page(f"s{n}"))]]) == [True]  # DRAM has it
            store.flush()
            assert (node.requests.get("PUT", 0) > before) is works, remote
        finally:
            store.close()


@pytest.mark.parametrize("connections_per_peer", [1, 4])
def test_connections_per_peer_bounds_the_pool(node: NodeServer, connections_per_peer: int) -> None:
    tier = build_store(remote_config(node, connections_per_peer=connections_per_peer))
    most = 0
    stop = threading.Event()

    def work(t: int) -> None:
        for i in range(30):
            keys = [f"c{t}-{i}-{j}" for j in range(4)]
            tier.put_batch(keys, [[memoryview(page(k))] for k in keys])

    def watch() -> None:
        nonlocal most
        while not stop.is_set():
            most = max(most, node.connections)
            stop.wait(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    watcher.join()
    tier.close()
    assert 1 <= most <= connections_per_peer
    if connections_per_peer > 1:
        assert most > 1  # eight threads at once use more than one


def test_rdma_keys_reach_the_engine_options() -> None:
    """``scratch_size`` is the RDMA engine's registered bounce memory (what the other keys do to the
    queue pairs: tests/transport/test_rdma_engine.py::test_7)."""
    cfg = validate_config({"tiers": {"remote": {"rdma": {"scratch_size": "1MiB"}}}})
    assert cfg.tiers.remote.rdma.options().scratch_bytes == MiB
    with pytest.raises(Exception, match="scratch_size"):
        validate_config({"tiers": {"remote": {"rdma": {"scratch_size": "1KiB"}}}})


def test_mooncake_keys_reach_the_client_setup() -> None:
    cfg = validate_config(
        {
            "tiers": {
                "remote": {
                    "enabled": True,
                    "provider": "mooncake",
                    "timeout_s": 2.0,
                    "mooncake": {"local_hostname": "10.1.2.3", "get_timeout_s": 0.5},
                }
            }
        }
    )
    provider = make_provider("mooncake", cfg.tiers.remote, cfg.metadata)
    assert provider.setup_config()["local_hostname"] == "10.1.2.3"  # type: ignore[attr-defined]
    assert provider.deadline_s("get", 2.0) == 0.5 and provider.deadline_s("put", 2.0) == 2.0
