"""A private host cache per test (``PrivateHostCache``); every service it started is stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from host_cache_procs import PrivateHostCache


@pytest.fixture
def host_cache(tmp_path: Path) -> Iterator[PrivateHostCache]:
    hc = PrivateHostCache(tmp_path)
    try:
        yield hc
    finally:
        hc.stop_all()
