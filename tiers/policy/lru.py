"""Least-recently-used: the baseline every other policy is measured against."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

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

    @property
    def evicts_oldest_first(self) -> bool:
        return type(self).pop_victim is LruPolicy.pop_victim  # a subclass may choose otherwise

    def on_set_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[bool]:
        """New distinct keys go to the MRU end in call order in one C-level update (what
        ``on_set`` of each does); any other batch, or a subclass's own ``on_set``, takes
        ``on_set`` per key."""
        order = self._order
        if (
            type(self).on_set is LruPolicy.on_set
            and order.keys().isdisjoint(keys)
            and len(set(keys)) == len(keys)
        ):
            order.update(dict.fromkeys(keys))
            return [True] * len(keys)
        return super().on_set_batch(keys, ctxs)

    def on_hit_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> None:
        """Tracked keys to the MRU end in call order, in C-level passes; a batch with an
        unknown key (which ``on_hit`` ignores), or a subclass's own ``on_hit``, takes ``on_hit``
        per key."""
        order = self._order
        if type(self).on_hit is LruPolicy.on_hit and all(map(order.__contains__, keys)):
            deque(map(order.move_to_end, keys), maxlen=0)
        else:
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
