"""The YAML presets shipped in ``configs/`` (also installed as package data)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml


def preset_dir() -> Path:
    """Where the presets are: ``configs/`` of a checkout, ``hicache_mooncake/configs/`` installed."""
    return Path(str(resources.files("hicache_mooncake.configs")))


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def preset_path(name: str = "default") -> Path:
    path = preset_dir() / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no preset {name!r} (looked for {path})")
    return path


def load_preset(name: str = "default") -> dict[str, Any]:
    data = yaml.safe_load(preset_path(name).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"preset {name!r} is not a mapping")
    return data
