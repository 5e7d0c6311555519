"""``PoolProvider``: how the bytes of one page of an SGLang host-pool class are addressed, and the
registry that picks the provider for a pool object (most specific first, the generic one last).

A new pool class that SGLang's own ``get_page_buffer_meta`` does not describe zero-copy gets a
new provider in a new file, registered with ``@register_provider``; nothing else changes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from hicache_mooncake.sglang_adapter.host_pool_views import pool_tensors


class PoolProvider(ABC):
    name: ClassVar[str] = ""
    priority: ClassVar[int] = 100
    """Lower is tried first; the generic provider has the highest number."""

    @classmethod
    @abstractmethod
    def handles(cls, pool: Any) -> bool:
        """Whether this provider knows how ``pool``'s pages are laid out."""

    def buffers(self, pool: Any) -> list[Any]:
        """The host tensors every page run of ``pool`` lies in (registered, bounds-checked)."""
        return pool_tensors(pool)

    def holds_bytes(self, pool: Any) -> bool:
        """False for a logical pool: pages are allocation slots with no bytes to store."""
        return True

    @abstractmethod
    def page_runs(self, pool: Any, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        """(pointer, size) runs of the pages at ``indices`` (``page_size`` indices per page), page
        by page in order, the same number of runs for every page. Pointers are only computed here,
        never dereferenced: the caller checks each run against ``buffers`` first."""


_PROVIDERS: list[type[PoolProvider]] = []


def register_provider(cls: type[PoolProvider]) -> type[PoolProvider]:
    _PROVIDERS.append(cls)
    _PROVIDERS.sort(key=lambda c: c.priority)
    return cls


def provider_for(pool: Any) -> PoolProvider:
    from hicache_mooncake.sglang_adapter.host_pools import generic, logical, mamba  # noqa: F401  (they register themselves)

    for cls in _PROVIDERS:
        if cls.handles(pool):
            return cls()
    raise TypeError(f"no pool provider handles {type(pool).__name__}")


def class_names(pool: Any) -> set[str]:
    """Names of ``pool``'s class and its bases (matching by name keeps SGLang imports lazy)."""
    return {c.__name__ for c in type(pool).__mro__}
