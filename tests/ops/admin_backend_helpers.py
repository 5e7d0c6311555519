"""Backends made by SGLang's own factory for the admin tests of tests/ops (layout, lookup through
the backend's key builder, an endpoint that cannot start): test-sized tiers, an admin endpoint on
loopback (port 0) with a token file unless a test sets its own ``admin`` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ops_helpers import TOKEN

from hicache_mooncake.tools.sglang_harness import PoolShape, make_host_pool, make_storage_config

DEFAULT_YAML = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
SHAPE = PoolShape(
    page_size=16, layers=3, heads=2, head_dim=64, device_tokens=2048, kv_lora_rank=64, qk_rope_head_dim=16
)
PS = SHAPE.page_size


def extra(tmp_path: Path, admin: dict[str, Any] | None = None) -> dict[str, Any]:
    """The shipped default YAML (what SGLang's loader needs), test-sized; ``admin`` replaces the
    admin section (default: port 0, a token file, a private discovery dir under ``tmp_path``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    data = yaml.safe_load(DEFAULT_YAML.read_text())
    data.pop("sglang", None)
    data["tiers"]["host_cache"] = "off"
    data["tiers"]["dram"].update({"capacity": "8MiB", "slab_size": "1MiB", "prefault": False})
    data["tiers"]["ssd"]["enabled"] = False
    data["metrics"] = {"port": None}
    data["admin"] = (
        admin
        if admin is not None
        else {"port": 0, "token_file": str(token), "discovery_dir": str(tmp_path / "disc")}
    )
    return dict(data)


def backend_of(
    tmp_path: Path,
    mla: bool = False,
    tp_lcm_size: int | None = None,
    register: bool = True,
    admin: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    host = make_host_pool("page_first", mla, SHAPE)
    cfg = make_storage_config(extra(tmp_path, admin), is_mla=mla, tp_lcm_size=tp_lcm_size)
    backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
    if register:
        backend.register_mem_pool_host(host)
        backend.on_host_pools_registered()
    return backend, host


def store_pages(backend: Any, host: Any, page_hashes: list[str]) -> Any:
    """SGLang's zero-copy set of ``page_hashes`` from fresh host pages; returns their indices."""
    indices = host.alloc(len(page_hashes) * PS)
    assert all(backend.batch_set_v1(page_hashes, indices))
    return indices


def page_hashes(n: int, tag: str = "a") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]
