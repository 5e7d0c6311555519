"""Name -> policy class. A new policy is a new module that calls ``register_policy``.

``make_policy`` raises ``KeyError`` naming the unknown policy and the known ones, so a typo in the
YAML fails at load time with the list to choose from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .base import EvictionPolicy

_POLICIES: dict[str, type[EvictionPolicy]] = {}
P = TypeVar("P", bound=type[EvictionPolicy])


def register_policy(cls: P) -> P:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no policy name")
    existing = _POLICIES.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(f"policy name {cls.name!r} is already taken by {existing.__qualname__}")
    _POLICIES[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    _load_builtin()
    return sorted(_POLICIES)


def make_policy(name: str, **options: Any) -> EvictionPolicy:
    """Instantiate the policy called ``name`` with its keyword options."""
    _load_builtin()
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known policies: {', '.join(sorted(_POLICIES))}") from None
    return cls(**options)


def policy_factory(name: str, **options: Any) -> Callable[[], EvictionPolicy]:
    """A zero-argument factory (validated now) for tiers that need one policy per size class."""
    make_policy(name, **options)
    return lambda: make_policy(name, **options)


def _load_builtin() -> None:
    # Importing the package imports every built-in policy module, each of which registers itself.
    from hicache_mooncake.tiers import policy  # noqa: F401
