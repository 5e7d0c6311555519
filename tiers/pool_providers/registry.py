"""Provider name -> builder. ``make_provider("mooncake", remote, metadata)``; a provider module
registers its builder on import (built-ins are imported on first use)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .base import PoolProvider, RemoteSettings

ProviderBuilder = Callable[[RemoteSettings, Any], PoolProvider]
_BUILDERS: dict[str, ProviderBuilder] = {}
_BUILTIN = {"nodes": ".nodes", "mooncake": ".mooncake"}


def register_provider(name: str) -> Callable[[ProviderBuilder], ProviderBuilder]:
    def wrap(fn: ProviderBuilder) -> ProviderBuilder:
        _BUILDERS[name] = fn
        return fn

    return wrap


def provider_names() -> list[str]:
    return sorted(set(_BUILDERS) | set(_BUILTIN))


def make_provider(name: str, remote: RemoteSettings, metadata: Any) -> PoolProvider:
    """Build the ``tiers.remote.provider`` named ``name`` from the ``tiers.remote`` section and
    the ``metadata:`` section (read by providers that use it)."""
    if name not in _BUILDERS and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name], __package__)
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown pool provider {name!r}; known: {', '.join(provider_names())}") from None
    return builder(remote, metadata)
