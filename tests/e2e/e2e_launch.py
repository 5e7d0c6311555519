"""Launching the e2e servers: a preset's YAML rewritten for one test's own paths and ports, and
``hicache-mooncake launch`` started and stopped as a user would (one server at a time)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from e2e_requests import ADMIN_API_KEY
from e2e_server import DEVICE, REPO, Server, device_flags, free_port, server_env

E2E_TIMINGS: dict[str, float] = {}
TORCH_EXTENSIONS = REPO / "build" / "e2e-torch-extensions"
"""SGLang's C++ page-hash extension is compiled here once (build/ is ignored by git), not in ~/.cache."""


def preset_yaml(preset: str, root: Path, edits: dict[str, Any] | None = None) -> Path:
    """``configs/PRESET.yaml`` as a user would copy it, with what a test machine needs changed: every
    path under ``root``, small tiers, the host pool laid out for the CPU's ``direct`` io backend
    (on a GPU the preset's own layout stays), the admin and metrics endpoints on free ports."""
    config = yaml.safe_load((REPO / "configs" / f"{preset}.yaml").read_text())
    tiers = config.setdefault("tiers", {})
    tiers["host_cache"] = "off"
    dram = tiers.setdefault("dram", {})
    dram.update(capacity="512KiB", max_capacity="4MiB", slab_size="256KiB", prefault=False)
    ssd = tiers.setdefault("ssd", {})
    if ssd.get("enabled", True):
        ssd.update(path=str(root / "ssd"), capacity="256MiB", region_size="4MiB", min_free="64MiB")
    config.setdefault("host_cache", {})["dir"] = str(root / "host-cache")
    config["admin"] = {"port": free_port(), "discovery_dir": str(root / "admin")}
    config["metrics"] = {"port": free_port(), "discovery_dir": str(root / "metrics")}
    section = config.setdefault("sglang", {})
    if DEVICE == "cpu":
        section.update(hicache_mem_layout="page_first_direct", hicache_io_backend="direct")
    _merge(config, edits or {})
    path = root / f"{preset}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _merge(into: dict[str, Any], edits: dict[str, Any]) -> None:
    for key, value in edits.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def launch_server(
    name: str, config: Path, model: Path, root: Path, env: dict[str, str] | None = None, extra: list[str] = ()
) -> Server:
    """``hicache-mooncake launch CONFIG -- --model-path MODEL ...`` (with the CPU flags on a CPU host),
    started and answering /health; its start-up time is recorded under ``name``."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "hicache_mooncake",
        "launch",
        str(config),
        "--",
        "--model-path",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-total-tokens",
        "8192",
        "--enable-cache-report",
        "--enable-metrics",
        "--admin-api-key",
        ADMIN_API_KEY,
        "--log-level",
        "info",
        *device_flags(),
        *extra,
    ]
    TORCH_EXTENSIONS.mkdir(parents=True, exist_ok=True)
    server = Server(argv, port, root / f"{name}.log", server_env(TORCH_EXTENSIONS, env))
    server.start()
    E2E_TIMINGS[f"{name} start"] = server.start_s
    return server
