"""Least-recently-used: the baseline every other policy is measured against."""

from __future__ import annotations

from collections import OrderedDict

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy


@register_policy
class LruPolicy(EvictionPolicy):
    """Classic LRU in access order (inserts and hits both move a key to the MRU end)."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[str, None] = OrderedDict()

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def on_set(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        self._order[key] = None
        self._order.move_to_end(key)
        return True

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def on_remove(self, key: str) -> None:
        self._order.pop(key, None)

    def pop_victim(self) -> str | None:
        if not self._order:
            return None
        key, _ = self._order.popitem(last=False)
        return key

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def clear(self) -> None:
        self._order.clear()
