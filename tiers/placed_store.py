"""``PlacedTieredStore``: DRAM and SSD placement decided by ONE policy over both tiers.

``policy.placement.TierPlacement`` owns the total local capacity (DRAM + SSD, counted in pages):
its eviction policy decides which pages leave the host, and DRAM holds the most recently used
resident pages. This store moves bytes as told:

- set: every key of the call goes through ``on_set`` in order; new (or re-set SSD) pages are
  copied into DRAM from the caller's buffers; a refused admission is a decision, not a failure
  (the call still returns True for it, counted as ``not_admitted``);
- get: a DRAM hit refreshes; an SSD hit is promoted into DRAM (free DRAM only); a hit on a page the
  placement does not know (recovered from SSD after a restart, or from the pool) is adopted;
- after each call: pages the policy dropped are removed from every local tier, DRAM overflow is
  handed to the background mover (copy to SSD, then free DRAM), so sets do not wait for the disk;
  only when the mover has fallen so far behind that DRAM is physically full does a set run the
  pending moves itself (back-pressure instead of dropping pages that exist nowhere else).

Capacities in pages are fixed at the first set from the page size: ``dram_fill`` of the DRAM
slots (headroom while the mover catches up) and ``ssd_fill`` of the SSD entries (headroom for
whole-region reclaim). The placement lock guards only bookkeeping; no I/O runs under it.
Physical state wins over bookkeeping: a page the placement lists but no tier holds (dropped under
pressure, reclaimed by the SSD engine) is forgotten when noticed.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from .demoter import Demoter
from .dram_tier import DramTier
from .parts import Parts
from .policy import AccessContext, EvictionPolicy, ObjectType
from .policy.contexts import get_contexts, miss_context, set_contexts
from .policy.placement import DRAM, SSD, TierPlacement
from .ssd_tier import SsdTier
from .tier import Tier
from .tiered_store import TieredStore

_OVERLAP_MIN = 8  # pages per call below which the hand-off to the worker costs more than it saves


class PlacedTieredStore(TieredStore):
    def __init__(
        self,
        tiers: Sequence[Tier],
        policy_factory: Callable[[], EvictionPolicy],
        demoter: Demoter | None,
        dram_fill: float = 0.9,
        ssd_fill: float = 0.85,
        block_capacity: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(tiers, demoter)
        self.dram = next((t for t in tiers if isinstance(t, DramTier)), None)
        self.ssd = next((t for t in tiers if isinstance(t, SsdTier)), None)
        self.remote = [t for t in tiers if t is not self.dram and t is not self.ssd]
        self._new_policy = policy_factory
        self.dram_fill, self.ssd_fill = dram_fill, ssd_fill
        self._block_capacity = block_capacity
        self._placement: TierPlacement | None = None
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        # Placement bookkeeping (Python) runs here while the caller's thread copies bytes (numpy,
        # GIL released), so a call costs max(copy, bookkeeping) instead of their sum.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hicache-placement")
        if demoter is not None:
            demoter.watermarks = False
        if self.ssd is not None:
            self.ssd.evict_listeners.append(self._forget)
            self.ssd.engine.keep = self._still_placed
        if block_capacity is not None:
            self._placement_for(0)

    # ------------------------------------------------------------------ bookkeeping
    def _placement_for(self, nbytes: int) -> TierPlacement:
        if self._placement is None:
            if self._block_capacity is not None:
                total, dram = self._block_capacity
            else:
                dram = int(self.dram.capacity_objects(nbytes) * self.dram_fill) if self.dram else 0
                ssd = int(self.ssd.capacity_objects(nbytes) * self.ssd_fill) if self.ssd else 0
                total = dram + ssd
            self._placement = TierPlacement(self._new_policy(), total, dram)
        return self._placement

    def _still_placed(self, key: str) -> bool:
        """SSD region reclaim asks: rewrite this entry? Yes while the placement holds the page and
        this SSD copy is its only one (placed on SSD, or placed in DRAM but not copied up). Called
        under the engine's lock: reads only (dict lookups; the DRAM tier's lock is never held
        while calling into the engine, so the order engine -> DRAM cannot deadlock)."""
        placement = self._placement
        if placement is None or key not in placement:
            return False
        return placement.tier_of(key) == SSD or self.dram is None or not self.dram.contains(key)

    def _forget(self, key: str) -> None:
        """The SSD engine dropped ``key``: forget it unless DRAM still holds the page."""
        if self.dram is not None and self.dram.contains(key):
            return
        with self._lock:
            if self._placement is not None and key in self._placement:
                self._placement.on_remove(key)
                self.counts["forgotten"] += 1

    def _settle(self, placement: TierPlacement) -> tuple[list[str], list[str]]:
        drops = [key for key, _tier in placement.victims_to_drop()]
        return drops, placement.dram_overflow()

    def _apply(self, drops: list[str], overflow: list[str]) -> None:
        for key in drops:
            for tier in (self.dram, self.ssd):
                if tier is not None:
                    tier.remove(key)
        with self._lock:
            self.counts["dropped"] += len(drops)
            self.counts["demotions"] += len(overflow)
        if overflow:
            if self.demoter is not None:
                self.demoter.move_later(overflow)
            elif self.dram is not None:  # no SSD: overflow simply leaves DRAM
                for key in overflow:
                    self.dram.remove(key)

    # ------------------------------------------------------------------ existence
    def exists_prefix(self, keys: Sequence[str]) -> int:
        n = super().exists_prefix(keys)
        if n < len(keys):
            ctx = miss_context(n, len(keys))
            with self._lock:
                if self._placement is not None:
                    self._placement.policy.on_miss(keys[n], ctx)
        return n

    # ------------------------------------------------------------------ reads
    def get_batch_into(
        self, keys: Sequence[str], parts: Sequence[Parts], obj_type: ObjectType = ObjectType.KV_PAGE
    ) -> list[bool]:
        if not keys:
            return []
        sizes = [sum(p.nbytes for p in ps) for ps in parts]
        ctxs = get_contexts(keys, sizes, self._request_len_of(keys), obj_type=obj_type)
        if self.dram is not None and len(keys) >= _OVERLAP_MIN and all(self.dram.contains_batch(keys)):
            # all in DRAM (the common hit): note the hits while the bytes are copied
            noted = self._worker.submit(self._note_dram_hits, keys, ctxs, sizes[0])
            done, _ = self._read_through(keys, parts, ctxs)
            drops, overflow = noted.result()
            if not all(done):  # evicted between the check and the read: forget what is gone
                with self._lock:
                    placement = self._placement_for(sizes[0])
                    for key, ok in zip(keys, done, strict=True):
                        if not ok and key in placement and not self._held(key):
                            placement.on_remove(key)
            self._apply(drops, overflow)
            return done
        done, level_of = self._read_through(keys, parts, ctxs)
        promote: list[int] = []
        with self._lock:
            placement = self._placement_for(sizes[0])
            for i, key in enumerate(keys):
                if not done[i]:
                    if key in placement and level_of[i] < 0:
                        placement.on_remove(key)  # bookkeeping said resident, no tier has it
                    continue
                if (
                    placement.on_hit(key, ctxs[i]) is None
                ):  # recovered from SSD or found in the pool: adopt it
                    placement.on_set([key], [replace(ctxs[i], promoted=True)])
                if self.tiers[level_of[i]] is not self.dram and placement.tier_of(key) == DRAM:
                    promote.append(i)
            drops, overflow = self._settle(placement)
        if promote and self.dram is not None:
            results = self.dram.put_batch(
                [(keys[i], parts[i], replace(ctxs[i], promoted=True)) for i in promote]
            )
            self.counts["promotions"] += sum(results)
            self.counts["promotions_skipped"] += len(results) - sum(results)
        self._apply(drops, overflow)
        return done

    def _note_dram_hits(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], nbytes: int
    ) -> tuple[list[str], list[str]]:
        with self._lock:
            placement = self._placement_for(nbytes)
            for key, ctx in zip(keys, ctxs, strict=True):
                if placement.on_hit(key, ctx) is None:
                    placement.on_set([key], [replace(ctx, promoted=True)])
            return self._settle(placement)

    def _held(self, key: str) -> bool:
        return any(t.contains(key) for t in (self.dram, self.ssd) if t is not None)

    # ------------------------------------------------------------------ writes
    def put_batch(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        prev_key: str | None = None,
        prefix_len: int | None = None,
        obj_type: ObjectType = ObjectType.KV_PAGE,
    ) -> list[bool]:
        if not keys:
            return []
        sizes = [sum(p.nbytes for p in ps) for ps in parts]
        in_dram = self.dram.contains_batch(keys) if self.dram is not None else [False] * len(keys)
        ctxs = set_contexts(keys, prefix_len or 0, prev_key, sizes, obj_type=obj_type)
        new = [i for i, held in enumerate(in_dram) if not held]
        dram = self.dram
        if dram is not None and len(new) >= _OVERLAP_MIN:
            # decide while copying the new pages into free DRAM (no eviction); pages the
            # placement then does not want there are removed again
            decided = self._worker.submit(self._decide_sets, keys, ctxs, sizes[0], in_dram)
            landed = dram.put_batch([(keys[i], parts[i], ctxs[i]) for i in new], evict=False)
            copy_to, stored, drops, overflow = decided.result()
            speculative = {i for i, ok in zip(new, landed, strict=True) if ok}
            wanted = set(copy_to[DRAM]).difference(i for i in speculative if keys[i] in set(drops))
            for i in speculative - wanted:
                dram.remove(keys[i])
            copy_to[DRAM] = [i for i in copy_to[DRAM] if i not in speculative]
        else:
            copy_to, stored, drops, overflow = self._decide_sets(keys, ctxs, sizes[0], in_dram)
        dropped = set(drops)
        self._apply(drops, overflow)
        need = len(copy_to[DRAM])
        if (
            need
            and self.dram is not None
            and self.demoter is not None
            and self.dram.free_objects(sizes[0]) < need
        ):
            self.demoter.move_now()  # the mover fell behind: wait for it rather than drop pages
        failed: list[str] = []
        for name, tier in ((DRAM, self.dram), (SSD, self.ssd)):
            todo = [i for i in copy_to[name] if keys[i] not in dropped]
            if not todo or tier is None:
                continue
            for i, ok in zip(todo, tier.put_batch([(keys[i], parts[i], ctxs[i]) for i in todo]), strict=True):
                stored[i] = ok
                if not ok:
                    failed.append(keys[i])
        if failed:
            with self._lock:
                self.counts["local_put_failed"] += len(failed)
                for key in failed:
                    if self._placement is not None:
                        self._placement.on_remove(key)
        for pool in self.remote:  # the shared pool keeps its own write-through semantics
            if not pool.write_through:
                continue
            todo = [i for i, found in enumerate(pool.contains_batch(keys)) if not found]
            if todo:
                results = pool.put_batch([(keys[i], parts[i], ctxs[i]) for i in todo])
                for i, ok in zip(todo, results, strict=True):
                    stored[i] = stored[i] or ok
        if self.demoter is not None:
            self.demoter.notify()
        return stored

    def _decide_sets(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], nbytes: int, in_dram: Sequence[bool]
    ) -> tuple[dict[str, list[int]], list[bool], list[str], list[str]]:
        """Placement bookkeeping of a set: which keys to copy where; drops and DRAM overflow."""
        copy_to: dict[str, list[int]] = {DRAM: [], SSD: []}
        stored = [True] * len(keys)  # admitted and already held, or refused by policy (a decision)
        with self._lock:
            placement = self._placement_for(nbytes)
            for i, key in enumerate(keys):
                before = placement.tier_of(key)
                if not placement.on_set([key], [ctxs[i]])[0]:
                    self.counts["not_admitted"] += before is None
                    continue
                target = placement.tier_of(key)
                if target == DRAM and not in_dram[i]:
                    copy_to[DRAM].append(i)  # new, or a re-set SSD page moving up with the call's bytes
                elif target == SSD and before is None:
                    copy_to[SSD].append(i)  # no DRAM tier
            drops, overflow = self._settle(placement)
        return copy_to, stored, drops, overflow

    def clear(self) -> None:
        with self._lock:
            self._placement = None
        super().clear()

    def close(self, flush_timeout_s: float = 0.0) -> None:
        self._worker.shutdown(wait=True)
        super().close(flush_timeout_s)

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        with self._lock:
            placement = self._placement
            out["placement"] = {
                "policy": type(placement.policy).__name__ if placement else None,
                "capacity_pages": placement.capacity if placement else None,
                "dram_pages": placement.dram_capacity if placement else None,
                "resident": len(placement) if placement else 0,
                "in_dram": placement.dram_len if placement else 0,
                **dict(self.counts),
            }
        return out
