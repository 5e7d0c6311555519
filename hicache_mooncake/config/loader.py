"""Turn what SGLang hands us (``storage_config.extra_config``) into a validated ``BackendConfig``.

Sources, in precedence order:
1. ``$HICACHE_MOONCAKE_CONFIG`` (a YAML path): when set, that file is the whole configuration and
   inline keys other than SGLang's loader keys are ignored (logged), so an operator can switch a
   deployment's config without touching the launch command.
2. the inline extra config (what ``@file.yaml`` or the JSON string became), deep-merged over
3. the YAML file named by its ``config_file`` key, if any.

Every failure raises ``ConfigError`` whose message names the source and, for schema errors, each
bad key as a dotted path with the reason.

``load_config_file`` is the one loader of every CLI command that takes a YAML (``demo``,
``node``, ``config``): the same reading, merging and wording as the backend's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import ConfigError
from .schema import LOADER_KEYS, SGLANG_CONSUMED_KEYS, SGLANG_INJECTED_KEYS, BackendConfig

log = logging.getLogger(__name__)
CONFIG_ENV = "HICACHE_MOONCAKE_CONFIG"


def config_file_path(path: str | os.PathLike[str]) -> Path:
    """``path`` without SGLang's ``@`` prefix, ``~`` expanded."""
    text_path = str(path)
    return Path(text_path[1:] if text_path.startswith("@") else text_path).expanduser()


def read_yaml_file(path: str | os.PathLike[str], origin: str = "config file") -> dict[str, Any]:
    """Parse a YAML mapping from ``path`` (``@`` prefix allowed); ConfigError on any problem."""
    file = config_file_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{origin} {file} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{origin} {file} cannot be read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin} {file} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin} {file}: the top level must be a mapping, got {type(data).__name__}")
    return data


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` wins; nested mappings merge key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def validate_config(data: Mapping[str, Any], source: str = "extra config") -> BackendConfig:
    """Validate a plain mapping; the error lists every bad key as a dotted YAML path."""
    try:
        return BackendConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"invalid hicache-mooncake configuration ({source}):"]
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "<top level>"
        if err["type"] == "extra_forbidden":
            reason = "unknown key"
        else:
            reason = err["msg"].removeprefix("Value error, ")
            shown = repr(err.get("input"))
            if err["type"] != "missing" and not isinstance(err.get("input"), dict) and shown not in reason:
                reason += f" (got {shown})"
        lines.append(f"  {path}: {reason}")
    return "\n".join(lines)


def load_backend_config(
    extra_config: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None = None,
    source: str = "extra config",
) -> BackendConfig:
    """Resolve and validate the configuration of one backend instance (see module docstring)."""
    env = os.environ if environ is None else environ
    inline = dict(extra_config or {})
    env_path = env.get(CONFIG_ENV)
    if env_path:
        sglang_keys = LOADER_KEYS | SGLANG_CONSUMED_KEYS | SGLANG_INJECTED_KEYS
        ignored = sorted(k for k in inline if k not in sglang_keys)
        if ignored:
            log.info(
                "%s=%s overrides the inline extra config; ignoring keys %s", CONFIG_ENV, env_path, ignored
            )
        data = read_yaml_file(env_path, origin=f"config file from ${CONFIG_ENV}")
        data.pop("config_file", None)
        return validate_config(data, source=env_path)
    file_path = inline.get("config_file")
    if file_path is not None:
        if not isinstance(file_path, str) or not file_path:
            raise ConfigError(
                "invalid hicache-mooncake configuration: config_file must be a non-empty path string"
            )
        base = read_yaml_file(file_path, origin="config file (config_file)")
        base.pop("config_file", None)
        data = deep_merge(base, {k: v for k, v in inline.items() if k != "config_file"})
        return validate_config(data, source=f"{file_path} + {source}")
    return validate_config(inline, source=source)


@dataclass(frozen=True)
class LoadedConfig:
    """A YAML file as the CLI loaded it: where, what it says, and its validated configuration."""

    path: Path
    data: dict[str, Any]
    config: BackendConfig

    def extra_config(self) -> dict[str, Any]:
        """What to hand SGLang's ``dynamic`` loader: the file's keys, with the loader keys that
        SGLang requires filled in from their defaults (so a partial file works too)."""
        return {**{k: getattr(self.config, k) for k in sorted(LOADER_KEYS)}, **self.data}


def load_config_file(path: str | os.PathLike[str]) -> LoadedConfig:
    """Read and validate one YAML file (``@`` prefix allowed) exactly as the backend would, minus
    ``$HICACHE_MOONCAKE_CONFIG`` (the caller named the file). ConfigError on any problem, naming
    the file, each bad key's path and the reason."""
    file = config_file_path(path)
    data = read_yaml_file(file)
    return LoadedConfig(file, data, load_backend_config(data, environ={}, source=str(file)))
