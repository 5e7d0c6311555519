"""Least-recently-used: the baseline every other policy is measured against."""

from __future__ import annotations

from collections.abc import Sequence

from hicache_mooncake.native import KeyOrder

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy


@register_policy
class LruPolicy(EvictionPolicy):
    """Classic LRU in access order (inserts and hits both move a key to the MRU end). The order is a
    native ``KeyOrder``: a batch of new keys, or of hits, is one call."""

    name = "lru"

    def __init__(self) -> None:
        self._order = KeyOrder()

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.on_set(key, ctx)

    def on_set(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        self._order[key] = 0
        self._order.move_to_end(key)
        return True

    @property
    def evicts_oldest_first(self) -> bool:
        return type(self).pop_victim is LruPolicy.pop_victim  # a subclass may choose otherwise

    def on_set_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[bool]:
        """New distinct keys go to the MRU end in call order in one native call (what ``on_set``
        of each does); any other batch, or a subclass's own ``on_set``, takes ``on_set`` per
        key."""
        if type(self).on_set is LruPolicy.on_set and self._order.add_new(keys, 0):
            return [True] * len(keys)
        return super().on_set_batch(keys, ctxs)

    def on_hit_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> None:
        """Tracked keys to the MRU end in call order, in one native call; a batch with an
        unknown key (which ``on_hit`` ignores), or a subclass's own ``on_hit``, takes ``on_hit``
        per key."""
        if not (type(self).on_hit is LruPolicy.on_hit and self._order.touch_many(keys)):
            super().on_hit_batch(keys, ctxs)

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
