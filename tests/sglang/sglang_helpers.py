"""Builders shared by the SGLang tests: test-sized configs and backends made by SGLang's factory."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from hicache_mooncake.tools.sglang_harness import PoolShape, make_host_pool, make_storage_config

REPO = Path(__file__).resolve().parents[2]
DEFAULT_YAML = REPO / "configs" / "default.yaml"
SMALL = PoolShape(
    page_size=16, layers=3, heads=2, head_dim=64, device_tokens=2048, kv_lora_rank=64, qk_rope_head_dim=16
)
LAYOUTS = ["page_first", "page_first_direct", "layer_first"]


def small_extra(**tiers: Any) -> dict[str, Any]:
    """The shipped default YAML with test-sized tiers (the preset itself asks for GiBs), tiers in
    this process (tests that want the host cache give it private paths: host_cache_procs)."""
    extra = yaml.safe_load(DEFAULT_YAML.read_text())
    extra = copy.deepcopy(extra)
    extra["tiers"]["host_cache"] = "off"
    extra["tiers"]["dram"].update({"capacity": "32MiB", "slab_size": "1MiB"})
    extra["tiers"]["ssd"]["enabled"] = False  # tests that want the SSD tier give it a temp dir
    extra.pop("sglang", None)  # the harness sizes its own pools: the preset's sglang: section is not them
    for name, overrides in tiers.items():
        if isinstance(overrides, dict):
            extra["tiers"].setdefault(name, {}).update(overrides)
        else:  # a plain key of ``tiers`` (e.g. policy="lru")
            extra["tiers"][name] = overrides
    return extra


def make_backend(
    layout: str = "page_first",
    mla: bool = False,
    extra: dict[str, Any] | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    shape: PoolShape = SMALL,
) -> tuple[Any, Any]:
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    host = make_host_pool(layout, mla, shape)
    cfg = make_storage_config(
        extra if extra is not None else small_extra(),
        is_mla=mla,
        layout=layout,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )
    backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
    backend.register_mem_pool_host(host)
    return backend, host


def threads_started_since(before: set[threading.Thread], settle_s: float = 5.0) -> list[str]:
    """Names of the threads alive now that were not in ``before``: what a detach leaked. A thread
    in the middle of ending gets ``settle_s`` (a leaked one never ends); threads of earlier tests
    that end meanwhile do not count either way (a count of live threads would)."""
    end = time.monotonic() + settle_s
    while True:
        new = [t for t in threading.enumerate() if t not in before]
        if not new or time.monotonic() >= end:
            return [t.name for t in new]
        time.sleep(0.05)
