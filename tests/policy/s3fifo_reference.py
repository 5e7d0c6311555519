"""The reference model of the S3-FIFO policy (``tiers/policy/s3fifo.py``): the policy as it ran
on OrderedDicts before its queues moved into native ``KeyOrder`` maps.
``tests/policy/test_s3fifo_native.py`` holds the policy to it, call for call.

S3-FIFO (Yang et al., SOSP'23): a small probationary FIFO, a main FIFO and a ghost FIFO.

New keys enter the small queue; a key evicted from it that was hit moves to the main queue,
otherwise it is evicted and remembered in the ghost queue (keys only). A re-inserted ghost goes
straight to main. Main is a FIFO with a 2-bit frequency that buys a key another round.
Sizes are counted in keys: the small queue's target is ``small_ratio`` of resident keys, the
ghost queue holds at most as many keys as are resident.
"""

from __future__ import annotations

from collections import OrderedDict

from hicache_mooncake.tiers.policy.base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy

_MAX_FREQ = 3


class RefS3FifoPolicy(EvictionPolicy):
    def __init__(self, small_ratio: float = 0.1, promote_threshold: int = 1) -> None:
        if not 0.0 < small_ratio < 1.0:
            raise ValueError(f"s3fifo small_ratio must be in (0, 1), got {small_ratio}")
        self.small_ratio = small_ratio
        self.promote_threshold = promote_threshold
        self._small: OrderedDict[str, None] = OrderedDict()
        self._main: OrderedDict[str, None] = OrderedDict()
        self._ghost: OrderedDict[str, None] = OrderedDict()
        self._freq: dict[str, int] = {}

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._freq:
            self.on_hit(key, ctx)
            return
        self._freq[key] = 0
        if key in self._ghost:
            del self._ghost[key]
            self._main[key] = None
        else:
            self._small[key] = None

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        freq = self._freq.get(key)
        if freq is not None and freq < _MAX_FREQ:
            self._freq[key] = freq + 1

    def on_remove(self, key: str) -> None:
        if self._freq.pop(key, None) is not None:
            self._small.pop(key, None)
            self._main.pop(key, None)

    def pop_victim(self) -> str | None:
        while self._freq:
            resident = len(self._small) + len(self._main)
            if self._small and (len(self._small) >= self.small_ratio * resident or not self._main):
                key, _ = self._small.popitem(last=False)
                if self._freq[key] >= self.promote_threshold:
                    self._freq[key] = 0
                    self._main[key] = None
                    continue
                del self._freq[key]
                self._remember_ghost(key)
                return key
            key, _ = self._main.popitem(last=False)
            freq = self._freq[key]
            if freq > 0:
                self._freq[key] = freq - 1
                self._main[key] = None
                continue
            del self._freq[key]
            return key
        return None

    def _remember_ghost(self, key: str) -> None:
        self._ghost[key] = None
        limit = max(1, len(self._freq))
        while len(self._ghost) > limit:
            self._ghost.popitem(last=False)

    def __len__(self) -> int:
        return len(self._freq)

    def __contains__(self, key: object) -> bool:
        return key in self._freq

    def clear(self) -> None:
        self._small.clear()
        self._main.clear()
        self._ghost.clear()
        self._freq.clear()
