"""Shared fixtures. SGLang is imported at most once per test session (it costs ~15 s and ~1 GB)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose their config explicitly; an operator's $HICACHE_MOONCAKE_CONFIG must not leak in."""
    monkeypatch.delenv("HICACHE_MOONCAKE_CONFIG", raising=False)


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))
