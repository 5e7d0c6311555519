"""Process fixtures (redis_server, node_factory) live in tests/conftest.py, shared by every suite.
Here: nodes with any ``node:`` overrides or no secret (``make_node``), and a private directory on
tmpfs for arena files (``shm_dir``)."""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from transport_procs import SECRET, NodeProc


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A directory of our own on the real /dev/shm tmpfs, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="hicache-test-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Callable[..., NodeProc]]:
    """Start ``hicache-mooncake node`` processes with ``node:`` overrides; each is stopped by PID."""
    started: list[NodeProc] = []

    def make(
        name: str,
        node: dict[str, object] | None = None,
        secret: str | None = SECRET,
        capacity: str = "64MiB",
        redis_url: str | None = None,
        namespace: str = "t",
    ) -> NodeProc:
        proc = NodeProc(tmp_path, name, redis_url, namespace, capacity, node=node, secret=secret)
        started.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for n in started:
            n.stop(signal.SIGTERM)
