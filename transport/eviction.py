"""The eviction contract a node's store needs, and the built-in LRU it uses by default.

Any object with ``on_insert(key)``, ``on_hit(key)``, ``on_remove(key)``, ``pop_victim()`` fits
(the policies of ``hicache_mooncake.tiers.policy`` do; the node command passes one of them when
the YAML names it). transport/ itself imports no policy package.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol


class Evictor(Protocol):
    def on_insert(self, key: str) -> None: ...

    def on_hit(self, key: str) -> None: ...

    def on_remove(self, key: str) -> None: ...

    def pop_victim(self) -> str | None: ...


class LruEvictor:
    def __init__(self) -> None:
        self._order: OrderedDict[str, None] = OrderedDict()

    def on_insert(self, key: str) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def on_hit(self, key: str) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def on_remove(self, key: str) -> None:
        self._order.pop(key, None)

    def pop_victim(self) -> str | None:
        if not self._order:
            return None
        return self._order.popitem(last=False)[0]

    def __len__(self) -> int:
        return len(self._order)
