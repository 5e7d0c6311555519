"""Shared fixtures. SGLang is imported at most once per test session (it costs ~15 s and ~1 GB)."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from host_cache_procs import PrivateHostCache, stop_services_under
from log_lines import Lines
from transport_procs import NodeProc, RedisProc, free_port

from hicache_mooncake import logs

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose their config explicitly; an operator's $HICACHE_MOONCAKE_CONFIG must not leak in."""
    monkeypatch.delenv("HICACHE_MOONCAKE_CONFIG", raising=False)


@pytest.fixture(autouse=True, scope="session")
def _own_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's own $XDG_RUNTIME_DIR: a host cache (and the admin and metrics registries) that a
    test reaches by the default paths is the suite's, never a service already running on the host
    (CI starts one first: scripts/dev.sh). Host cache services left there are stopped by PID."""
    runtime = tmp_path_factory.mktemp("xdg-runtime")
    runtime.chmod(0o700)
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        yield
    finally:
        stop_services_under(runtime)
        if old is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = old


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def redis_server() -> Iterator[RedisProc]:
    """A real redis-server on a free loopback port, killed by PID afterwards."""
    r = RedisProc(free_port())
    r.start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def node_factory(tmp_path: Path) -> Iterator[Callable[..., NodeProc]]:
    """Start memory-node processes (``hicache-mooncake node``); each is stopped by PID afterwards."""
    started: list[NodeProc] = []

    def make(
        name: str,
        redis_url: str | None = None,
        namespace: str = "t",
        capacity: str = "64MiB",
        slab_size: str = "4MiB",
    ) -> NodeProc:
        node = NodeProc(tmp_path, name, redis_url, namespace, capacity, node={"slab_size": slab_size}).start()
        started.append(node)
        return node

    try:
        yield make
    finally:
        for n in started:
            n.stop(signal.SIGTERM)


@pytest.fixture
def printed_lines() -> Iterator[Lines]:
    """The log lines a user sees (after a fresh repeat limiter), at WARNING and above."""
    root = logging.getLogger()
    lines = Lines()
    lines.setLevel(logging.WARNING)
    root.addHandler(lines)
    logs.install(logs.RepeatLimiter())
    try:
        yield lines
    finally:
        root.removeHandler(lines)
        logs.uninstall()


@pytest.fixture
def host_cache(tmp_path: Path) -> Iterator[PrivateHostCache]:
    """A private host cache (own socket, shm and SSD directories); every service it had is
    stopped by PID afterwards."""
    hc = PrivateHostCache(tmp_path)
    try:
        yield hc
    finally:
        hc.stop_all()
