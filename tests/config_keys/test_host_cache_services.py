"""``host_cache.dir``, ``name``, ``shm_dir`` and ``max_clients`` shown on real services: two names in
one directory are two services (each its own socket, lock and log, its own arena under its
``shm_dir``) that share no page, and a service holds at most ``max_clients`` connections at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from host_cache_procs import PrivateHostCache

from hicache_mooncake.config import BackendConfig, validate_config
from hicache_mooncake.host_cache.lock import holder_pid
from hicache_mooncake.store_builder import build_client_store
from hicache_mooncake.transport.node_client import NodeClient
from hicache_mooncake.transport.options import ClientOptions

pytestmark = pytest.mark.integration


def _node_stats(sock: Path) -> dict[str, Any]:
    client = NodeClient(f"unix:{sock}", 0, ClientOptions(timeout_s=5), "tcp")
    try:
        stats: dict[str, Any] = client.stats()["node"]
        return stats
    finally:
        client.close()


def _config(hc: PrivateHostCache, ssd: Path | None = None, **keys: Any) -> BackendConfig:
    extra = hc.extra(host_cache="on", ssd={"path": str(ssd)} if ssd else {})
    extra["host_cache"].update(keys)
    return validate_config(extra)


def test_name_dir_shm_dir_and_max_clients_shape_the_service(
    host_cache: PrivateHostCache, tmp_path: Path
) -> None:
    shm_b = Path(host_cache.shm_dir) / "b-arenas"
    shm_b.mkdir()
    configs = {
        "alpha": _config(host_cache, name="alpha", max_clients=1),
        "beta": _config(host_cache, tmp_path / "ssd-beta", name="beta", shm_dir=str(shm_b)),
    }
    stores = {}
    try:
        for name, config in configs.items():
            stores[name] = build_client_store(config, "rank0", True)
            pid = holder_pid(str(host_cache.run_dir / f"{name}.lock"))
            assert pid is not None, host_cache.log_tail()
            host_cache.seen.add(pid)  # stopped by PID at teardown
        pids = {name: holder_pid(str(host_cache.run_dir / f"{name}.lock")) for name in configs}
        assert pids["alpha"] != pids["beta"]  # two names: two services
        for name in configs:  # each at <dir>/<name>.sock/.lock/.log
            for suffix in (".sock", ".lock", ".log"):
                assert (host_cache.run_dir / f"{name}{suffix}").exists(), (name, suffix)
        assert not (host_cache.run_dir / "host-cache.sock").exists()
        arenas_a = [f for f in os.listdir(host_cache.shm_dir) if "alpha" in f]
        arenas_b = [f for f in os.listdir(shm_b) if "beta" in f]
        assert len(arenas_a) == 1 and len(arenas_b) == 1  # each arena under its own shm_dir
        assert not [f for f in os.listdir(host_cache.shm_dir) if "beta" in f]

        page = np.arange(4096, dtype=np.uint8)
        assert stores["alpha"].put_batch(["p"], [[memoryview(page)]]) == [True]
        assert stores["alpha"].exists_prefix(["p"]) == 1
        assert stores["beta"].exists_prefix(["p"]) == 0  # not shared across names

        # max_clients: a second client connection to alpha (max 1) makes the idle one give way;
        # beta (the default) holds both.
        for name in configs:
            _node_stats(host_cache.run_dir / f"{name}.sock")
        alpha, beta = (_node_stats(host_cache.run_dir / f"{n}.sock") for n in configs)
        assert alpha["connections"] == 1 and alpha["errors"].get("idle_connections_closed", 0) >= 1
        assert beta["connections"] >= 2 and beta["errors"].get("idle_connections_closed", 0) == 0
    finally:
        for store in stores.values():
            store.close()


def test_connections_caps_the_connections_a_backend_opens_to_the_service(
    host_cache: PrivateHostCache, tmp_path: Path
) -> None:
    """``host_cache.connections``: eight threads hammering one backend open exactly one connection to
    the service with ``connections: 1``, and more than one (never more than 4) with ``connections: 4``
    (the service counts each client's connections; our stats request adds one)."""
    from concurrent.futures import ThreadPoolExecutor

    configs = {
        "one": _config(host_cache, name="one", connections=1),
        "four": _config(host_cache, tmp_path / "ssd-four", name="four", connections=4),
    }
    stores = {}
    try:
        for name, config in configs.items():
            stores[name] = build_client_store(config, "rank0", True)
            pid = holder_pid(str(host_cache.run_dir / f"{name}.lock"))
            assert pid is not None, host_cache.log_tail()
            host_cache.seen.add(pid)
        page = np.arange(4096, dtype=np.uint8)
        opened = {}
        for name, store in stores.items():
            assert store.put_batch(["c"], [[memoryview(page)]]) == [True]

            def hammer(_: int, store: Any = store) -> None:
                for _ in range(150):
                    store.exists_prefix(["c"])

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(hammer, range(8)))
            clients = _node_stats(host_cache.run_dir / f"{name}.sock")["clients"]
            opened[name] = clients[f"pid:{os.getpid()}"]["connections"] - 1  # less our stats request
        assert opened["one"] == 1
        assert 2 <= opened["four"] <= 4, opened
    finally:
        for store in stores.values():
            store.close()


def test_retry_interval_s_is_how_soon_a_backend_restarts_a_killed_service(
    host_cache: PrivateHostCache, tmp_path: Path
) -> None:
    """``host_cache.retry_interval_s``: both services are killed; the backend checking every 0.2 s
    has started its service again within seconds, the one checking every 60 s has not."""
    import signal
    import time

    configs = {
        "fast": _config(host_cache, name="fast", retry_interval_s=0.2),
        "slow": _config(host_cache, tmp_path / "ssd-slow", name="slow", retry_interval_s=60.0),
    }
    stores, first = {}, {}
    try:
        for name, config in configs.items():
            stores[name] = build_client_store(config, "rank0", True)
            pid = holder_pid(str(host_cache.run_dir / f"{name}.lock"))
            assert pid is not None, host_cache.log_tail()
            first[name] = pid
            host_cache.seen.add(pid)
        for pid in first.values():
            host_cache.kill(pid, signal.SIGKILL)

        def restarted(name: str) -> int | None:
            pid = holder_pid(str(host_cache.run_dir / f"{name}.lock"))
            if pid is not None:
                host_cache.seen.add(pid)
            return pid if pid not in (None, first[name]) else None

        deadline = time.monotonic() + 20
        while restarted("fast") is None:
            assert time.monotonic() < deadline, "the 0.2 s backend never restarted its service"
            time.sleep(0.05)
        time.sleep(1.0)  # five more of the fast backend's checks
        assert restarted("slow") is None
    finally:
        for store in stores.values():
            store.close()
