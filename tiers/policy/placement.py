"""Two-tier placement driven by ONE policy that owns the total capacity.

``TierPlacement`` decides, keys only, where each page lives: the eviction policy decides what
leaves the *system* (capacity = DRAM + SSD pages); DRAM holds the most recently used subset of the
resident pages. A store (``TieredStore``, the replay sim) calls it and moves bytes as told:

- ``on_set(keys, ctxs) -> admitted``: new pages go to DRAM (every key of the list is resident
  afterwards unless the policy dropped it while making room); then call ``victims_to_drop()`` and
  ``dram_overflow()``.
- ``on_hit(key, ctx) -> tier``: a read; returns where the page was ("dram"/"ssd"/None). An SSD hit
  is a promotion: the page is now placed in DRAM (copy it up), then call ``dram_overflow()``.
- ``victims_to_drop() -> [(key, tier)]``: pages that left the system and the tier to delete
  them from.
- ``dram_overflow() -> keys``: pages to demote DRAM -> SSD (least recently used first).

Invariants (after draining both lists): ``len(policy) <= capacity``; ``dram ⊆ resident``;
``len(dram) <= dram_capacity``; a resident page not in DRAM is on SSD; with ``dram_capacity ==
capacity`` nothing is ever demoted. Total hits therefore equal those of the single-tier policy
of the same total capacity. Not thread-safe (callers lock); no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from .base import AccessContext, EvictionPolicy

DRAM, SSD = "dram", "ssd"


class TierPlacement:
    """One eviction policy over the whole capacity; DRAM = the MRU subset (module docstring)."""

    def __init__(self, policy: EvictionPolicy, capacity: int, dram_capacity: int) -> None:
        if capacity < 0 or not 0 <= dram_capacity <= capacity:
            raise ValueError(f"need 0 <= dram_capacity <= capacity, got {dram_capacity}, {capacity}")
        self.policy = policy
        self.capacity = capacity
        self.dram_capacity = dram_capacity
        self._dram: OrderedDict[str, None] = OrderedDict()  # LRU order, MRU last
        self._drop: list[tuple[str, str]] = []

    def tier_of(self, key: str) -> str | None:
        if key in self._dram:
            return DRAM
        return SSD if key in self.policy else None

    def __contains__(self, key: object) -> bool:
        return key in self.policy

    def __len__(self) -> int:
        return len(self.policy)

    @property
    def dram_len(self) -> int:
        return len(self._dram)

    def on_set(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[bool]:
        """Store ``keys`` (new pages go to DRAM, or SSD when there is no DRAM); per-key admitted."""
        if self.capacity <= 0:
            return [False] * len(keys)
        for key, ctx in zip(keys, ctxs, strict=True):
            if key not in self.policy and not self.policy.should_admit(key, ctx):
                continue
            self.policy.on_insert(key, ctx)
            self._make_room()
            if self.dram_capacity > 0 and key in self.policy:
                self._dram[key] = None
                self._dram.move_to_end(key)
        return [key in self.policy for key in keys]

    def on_hit(self, key: str, ctx: AccessContext) -> str | None:
        """A read of ``key``: refresh it; an SSD page is promoted to DRAM. Returns its old tier."""
        tier = self.tier_of(key)
        if tier is None:
            return None
        self.policy.on_hit(key, ctx)
        if self.dram_capacity > 0:
            self._dram[key] = None
            self._dram.move_to_end(key)
        return tier

    def on_remove(self, key: str) -> None:
        self.policy.on_remove(key)
        self._dram.pop(key, None)

    def victims_to_drop(self) -> list[tuple[str, str]]:
        """``(key, tier)`` of each page that left the system since the last call, in order."""
        out, self._drop = self._drop, []
        return out

    def dram_overflow(self) -> list[str]:
        """Pages to move DRAM -> SSD now (least recently used first); they stay resident."""
        out = []
        while len(self._dram) > self.dram_capacity:
            key, _ = self._dram.popitem(last=False)
            out.append(key)
        return out

    def _make_room(self) -> None:
        while len(self.policy) > self.capacity:
            victim = self.policy.pop_victim()
            if victim is None:
                break
            tier = DRAM if victim in self._dram else SSD
            self._dram.pop(victim, None)
            self._drop.append((victim, tier))
