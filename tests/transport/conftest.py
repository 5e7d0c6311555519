"""Fixtures that start real processes on loopback: redis-server and memory nodes (stopped by PID)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from transport_procs import NodeProc, RedisProc, free_port


@pytest.fixture
def redis_server() -> Iterator[RedisProc]:
    r = RedisProc(free_port())
    r.start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def node_factory(tmp_path: Path) -> Iterator[object]:
    started: list[NodeProc] = []

    def make(
        name: str, redis_url: str | None = None, namespace: str = "t", capacity: str = "64MiB"
    ) -> NodeProc:
        node = NodeProc(tmp_path, name, redis_url, namespace, capacity).start()
        started.append(node)
        return node

    try:
        yield make
    finally:
        for n in started:
            n.stop(signal.SIGTERM)
