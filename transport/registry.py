"""Engine name -> class. ``make_engine("tcp")``; a new backend registers itself on import."""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

from .engine import TransferEngine

_ENGINES: dict[str, type] = {}
_BUILTIN = {"tcp": ".tcp", "local": ".local", "rdma": ".rdma.engine"}
E = TypeVar("E", bound=type)


def register_engine(cls: E) -> E:
    name = getattr(cls, "name", "")
    if not name:
        raise ValueError(f"{cls.__qualname__} has no engine name")
    _ENGINES[name] = cls
    return cls


def engine_names() -> list[str]:
    return sorted(set(_ENGINES) | set(_BUILTIN))


def engine_class(name: str) -> type:
    if name not in _ENGINES and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name], __package__)
    try:
        return _ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown transfer engine {name!r}; known: {', '.join(engine_names())}") from None


def make_engine(name: str, **options: Any) -> TransferEngine:
    engine: TransferEngine = engine_class(name)(**options)
    return engine
