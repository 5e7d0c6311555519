"""Helpers of the runtime-operation tests (tests/ops): a test-sized configuration for the real store
builder, and waiting for an admin operation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hicache_mooncake.admin.client import AdminClient
from hicache_mooncake.config import BackendConfig
from hicache_mooncake.config.loader import deep_merge, validate_config

TOKEN = "s3cret-admin-token"


def small_config(tmp_path: Path, ssd: bool = True, **overrides: Any) -> BackendConfig:
    """DRAM 4 MiB (1 MiB slabs, may grow to 8 MiB) and, with ``ssd``, 16 MiB of 1 MiB regions
    (may grow to 32 MiB) in ``tmp_path/ssd``; no periodic snapshot."""
    data: dict[str, Any] = {
        "tiers": {
            "policy": "lru",
            "dram": {"capacity": "4MiB", "slab_size": "1MiB", "prefault": False, "max_capacity": "8MiB"},
            "ssd": {
                "enabled": ssd,
                "path": str(tmp_path / "ssd"),
                "capacity": "16MiB",
                "max_capacity": "32MiB",
                "region_size": "1MiB",
                "min_free": 0,
                "direct_io": "off",
            },
            "warm": {"interval_s": 0},
        },
    }
    return validate_config(deep_merge(data, copy.deepcopy(overrides)))


def finished(client: AdminClient, started: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """Wait for an operation started through ``client``; it must have run (not failed)."""
    op = client.wait(started, timeout_s)
    assert op["state"] == "done", op
    return op
