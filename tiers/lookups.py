"""The store's existence views (``Lookups``): which keys some tier holds, and where.

- ``exists``: the per-key flags and their leading run of hits; remembers the request's length
  (its first key -> key count) for the reads that follow, counts the call for the tenant of its
  first key, and tells the policy the first miss (``TierPlacement.miss``).
- ``contains``: the same flags, telling nobody (a hybrid model's sidecar objects have holes that
  matter).
- ``where``: per key, the name of the fastest tier holding it; read-only, no lock, no count.

Each tier is asked once per call, for the keys the tiers before it lack. Index lookups only:
no I/O runs for the local tiers; a pool is asked once per batch, within its own deadline. The
keys are fingerprinted once per call (``native.fingerprints``) and each tier gets the
fingerprints of the keys it is asked for (``Tier.contains_batch``'s ``fps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import not_

import numpy as np

from hicache_mooncake.native import fingerprints

from .policy.contexts import miss_context
from .store_state import REQUEST_MEMORY, StoreState
from .tier import Tier


class Lookups:
    def __init__(self, state: StoreState) -> None:
        self.state = state

    def exists(self, keys: Sequence[str]) -> tuple[list[bool], int]:
        """Per key whether some tier holds it, and the length of the leading run of hits."""
        if not keys:
            return [], 0
        state = self.state
        n = len(keys)
        present = self.contains(keys)
        hit = present.index(False) if False in present else n
        with state.lock:
            request_len = state.request_len
            request_len[keys[0]] = n
            request_len.move_to_end(keys[0])
            if len(request_len) > REQUEST_MEMORY:
                request_len.popitem(last=False)
            state.tenant_count_locked(keys[0], exists_pages=n, exists_hit_pages=hit)
            if hit < n and state.local and state.placement is not None:
                state.placement.miss(keys[hit], miss_context(hit, n))
        return present, hit

    def contains(self, keys: Sequence[str]) -> list[bool]:
        """Per key, whether some tier holds it: each tier is asked once, for the keys the tiers
        before it lack (the index work runs in batches, not per key in Python)."""
        tiers = self._existence_order()
        if not tiers or not keys:
            return [False] * len(keys)
        fps = fingerprints(keys)
        present = list(tiers[0].contains_batch(keys, fps))
        for tier in tiers[1:]:
            if all(present):
                break
            pending = list(compress(range(len(keys)), map(not_, present)))
            found = tier.contains_batch(list(map(keys.__getitem__, pending)), fps[pending])
            for i in compress(pending, found):
                present[i] = True
        return present

    def where(self, keys: Sequence[str], pools: bool = False) -> list[str | None]:
        """Per key, the name of the fastest tier holding it (read order: DRAM, SSD, then the pools
        when ``pools``), else None. Read-only: one index lookup batch per tier (each tier asked only
        for the keys the ones before lack), no store lock, no policy call, no count: a lookup is
        not a hit. Without ``pools`` no I/O runs; a pool is asked once for the batch (its deadline)."""
        lay = self.state.layout
        local = [t for t in (lay.dram, lay.ssd) if t is not None]
        where: list[str | None] = [None] * len(keys)
        pending = list(range(len(keys)))
        fps: np.ndarray = fingerprints(keys) if keys else np.zeros(0, np.uint64)
        for tier in (*local, *lay.pools) if pools else local:
            if not pending:
                break
            found = tier.contains_batch([keys[i] for i in pending], fps[pending])
            for i in compress(pending, found):
                where[i] = tier.name
            pending = [i for i, hit in zip(pending, found, strict=True) if not hit]
        return where

    def _existence_order(self) -> tuple[Tier, ...]:
        """The order ``contains`` asks the tiers in: the local ones (in-memory index lookups)
        first, the one holding more entries before the other, then the pools in read order.

        The answer does not depend on the order; its cost does. Each tier is asked only for the
        keys the ones before it lack, and at a million entries every lookup of a fresh key costs
        a few cache misses whether it hits or not. With the SSD holding most pages (every one, in
        write-through), asking DRAM first made most keys cost two lookups."""
        lay = self.state.layout
        dram, ssd = lay.dram, lay.ssd
        if dram is None or ssd is None:
            return lay.tiers
        local = (ssd, dram) if ssd.entry_count() > dram.entry_count() else (dram, ssd)
        return (*local, *lay.pools)
