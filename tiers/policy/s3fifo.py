"""S3-FIFO (Yang et al., SOSP'23): a small probationary FIFO, a main FIFO and a ghost FIFO.

New keys enter the small queue; a key evicted from it that was hit moves to the main queue,
otherwise it is evicted and remembered in the ghost queue (keys only). A re-inserted ghost goes
straight to main. Main is a FIFO with a 2-bit frequency that buys a key another round (CLOCK-like).
Sizes are counted in keys: the small queue's target is ``small_ratio`` of resident keys, the
ghost queue holds at most as many keys as are resident.

The three queues are native ``KeyOrder`` maps (a resident key's value is its frequency; a ghost's
is 1, so that trimming the ghost queue is one ``pop_oldest``): 48 bytes per key instead of an
OrderedDict node plus a dict entry, and a batch of new keys enters in one call. Decisions are the
ones the OrderedDict version made, call for call (``tests/policy/s3fifo_reference.py``, held to
it by ``tests/policy/test_s3fifo_native.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hicache_mooncake.native import KeyOrder

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy

_MAX_FREQ = 3


@register_policy
class S3FifoPolicy(EvictionPolicy):
    name = "s3fifo"

    def __init__(self, small_ratio: float = 0.1, promote_threshold: int = 1) -> None:
        if not 0.0 < small_ratio < 1.0:
            raise ValueError(f"s3fifo small_ratio must be in (0, 1), got {small_ratio}")
        self.small_ratio = small_ratio
        self.promote_threshold = promote_threshold
        self._small = KeyOrder()  # key -> frequency
        self._main = KeyOrder()  # key -> frequency
        self._ghost = KeyOrder()  # key -> 1

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._small or key in self._main:
            self.on_hit(key, ctx)
            return
        if self._ghost.pop(key, None) is not None:
            self._main[key] = 0
        else:
            self._small[key] = 0

    def on_set_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[bool]:
        """New keys, none of them a ghost (the usual batch): into the small queue in one call;
        any other batch as ``on_set`` per key (the same state either way)."""
        if not self._main.any_in(keys) and not self._ghost.any_in(keys) and self._small.add_new(keys, 0):
            return [True] * len(keys)
        return super().on_set_batch(keys, ctxs)

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        queue = self._small
        freq = queue.get(key)
        if freq is None:
            queue = self._main
            freq = queue.get(key)
            if freq is None:
                return
        if freq < _MAX_FREQ:
            queue[key] = freq + 1  # its place in the queue stays

    def on_remove(self, key: str) -> None:
        if self._small.pop(key, None) is None:
            self._main.pop(key, None)

    def pop_victim(self) -> str | None:
        small, main = self._small, self._main
        while small or main:
            if small and (len(small) >= self.small_ratio * (len(small) + len(main)) or not main):
                key, freq = small.popitem(last=False)
                if freq >= self.promote_threshold:
                    main[key] = 0
                    continue
                self._remember_ghost(key)
                return key
            key, freq = main.popitem(last=False)
            if freq > 0:
                main[key] = freq - 1
                continue
            return key
        return None

    def _remember_ghost(self, key: str) -> None:
        ghost = self._ghost
        ghost[key] = 1
        over = len(ghost) - max(1, len(self))
        if over > 0:
            ghost.pop_oldest(over)

    def __len__(self) -> int:
        return len(self._small) + len(self._main)

    def __contains__(self, key: object) -> bool:
        return key in self._small or key in self._main

    def clear(self) -> None:
        self._small.clear()
        self._main.clear()
        self._ghost.clear()
