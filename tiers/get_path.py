"""The get path of a ``TieredStore`` (``GetPath.get``), as its steps:

1. read through (``_read_through``): each key from the first tier that has it, tier by tier
   (DRAM, the pools, SSD: the layout's read order), one batch per tier for the keys the tiers
   before it lack; results after the first key no tier has are False (SGLang uses only the
   leading run).
2. note the reads (``_note_reads``): one placement call per key read (``hit``; a page the
   placement does not know, recovered from SSD or found in the pool, is adopted). Returns the
   pages to copy up into DRAM: an SSD hit when the SSD tier says it is hot
   (``promote_min_hits``), a pool hit when the pool says so. Frozen, or the tenant being
   cleared: nothing is promoted.
3. promote: the pages to copy up are copied into DRAM from the caller's buffers (already filled:
   no second read); a page that found no room is placed back where it lives (``_reconcile``).
4. settle: what the placement wants dropped or demoted now is done (``StoreState.settle``).

The usual read, every page from DRAM and known there, takes steps 2 and 4 (and the tenant count)
in one hold of the store lock and one placement batch call (``_dram_hit_noted``).

The clear fence is read before any byte is: bytes read before a clear are never promoted after
it, and a read across a clear is not told to the placement (counted ``reads_across_clear``).
Failure semantics: a tier's miss, I/O error or deadline is a miss of that key, never an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hicache_mooncake.native import fingerprints

from .parts import Parts, pages_sizes
from .policy import AccessContext, ObjectType
from .policy.contexts import get_contexts
from .policy.placement import DRAM, SSD
from .store_state import StoreState
from .tier import Tier


class GetPath:
    def __init__(self, state: StoreState) -> None:
        self.state = state

    def get(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        obj_type: ObjectType = ObjectType.KV_PAGE,
        deadline: float | None = None,
    ) -> list[bool]:
        """``TieredStore.get_batch_into`` (module docstring)."""
        if not keys:
            return []
        deadline = self.state.deadline(deadline)
        sizes = pages_sizes(parts)
        dram = self.state.dram
        # the fence, read before any byte is: a promotion of bytes read before a clear never lands
        generation = dram.generation if dram is not None else None
        # two reads the GIL makes atomic (a C-level dict lookup, an int): no lock hold for them
        request_len = self.state.request_len.get(keys[0], 0)
        epoch = self.state.clear_epoch
        ctxs = get_contexts(keys, sizes, request_len, obj_type=obj_type)
        fps = fingerprints(keys)  # once for every tier of the call
        done, level_of = self._read_through(keys, parts, ctxs, deadline, fps)
        if self._dram_hit_noted(keys, ctxs, done, level_of, epoch):
            return done
        self.state.tenant_count(keys[0], get_pages=len(keys), get_hit_pages=sum(done))
        promote = self._note_reads(keys, ctxs, done, level_of, sizes[0], epoch)
        if promote and dram is not None:
            landed = dram.put_batch(
                [(keys[i], parts[i], ctxs[i]) for i in promote], deadline, generation, fps=fps[promote]
            )
            failed = [keys[i] for i, ok in zip(promote, landed, strict=True) if not ok]
            self.state.counts["promotions"] += len(promote) - len(failed)
            if failed:
                if dram.generation != generation:
                    self.state.counts["promotions_skipped_clear"] += len(failed)
                else:
                    self.state.counts["promotions_skipped_full"] += len(failed)
                self._reconcile(failed)
        self.state.settle()
        return done

    def _dram_hit_noted(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        done: Sequence[bool],
        level_of: Sequence[Tier | None],
        epoch: int,
    ) -> bool:
        """The usual read, every page served by DRAM and known there: its tenant count, the
        placement's hits (``TierPlacement.hit_in_dram_batch``) and the settle in ONE hold of the
        store lock (each hold costs ~8 us right after a copy has evicted the caches), then what
        the settle asks done. False when the read is not that one (nothing done: the caller
        takes the general steps, which decide the same)."""
        state, dram = self.state, self.state.dram
        if dram is None or not state.local or level_of.count(dram) != len(keys) or not all(done):
            return False
        with state.lock:
            if epoch != state.clear_epoch or (placement := state.placement) is None:
                return False
            state.forget_reclaimed(placement)
            if not placement.hit_in_dram_batch(keys, ctxs):
                return False
            state.tenant_count_locked(keys[0], get_pages=len(keys), get_hit_pages=len(keys))
            drops, demote = placement.settle()
        state.apply(drops, demote)
        return True

    def _reconcile(self, keys: Sequence[str]) -> None:
        """``keys`` are not in DRAM although the placement may place them there: they stay placed
        on SSD when it holds them, and are forgotten otherwise."""
        ssd_tier, dram_tier = self.state.ssd, self.state.dram
        fps = fingerprints(keys)  # once for both tiers
        on_ssd = ssd_tier.contains_batch(keys, fps) if ssd_tier is not None else [False] * len(keys)
        in_dram = dram_tier.contains_batch(keys, fps) if dram_tier is not None else [False] * len(keys)
        with self.state.lock:
            placement = self.state.placement
            if placement is None:
                return
            for key, ssd, dram in zip(keys, on_ssd, in_dram, strict=True):
                if dram:
                    continue
                if ssd:
                    placement.leave_dram(key)
                else:
                    placement.remove(key)

    def _read_through(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        ctxs: Sequence[AccessContext],
        deadline: float,
        fps: np.ndarray,
    ) -> tuple[list[bool], list[Tier | None]]:
        """Each key from the first tier that has it, tier by tier, stopping at the first key no
        tier has (SGLang uses only the leading run). Returns per key whether its bytes were copied
        and from which tier."""
        n = len(keys)
        done = [False] * n
        level_of: list[Tier | None] = [None] * n
        pending = list(range(n))
        for tier in self.state.tiers:
            if not pending:
                break
            if len(pending) == n:
                got = tier.get_batch_into(
                    list(zip(keys, parts, ctxs, strict=True)), deadline=deadline, fps=fps
                )
                if all(got):  # the first tier served them all (the usual hit)
                    return [True] * n, [tier] * n
            else:
                got = tier.get_batch_into(
                    [(keys[i], parts[i], ctxs[i]) for i in pending], deadline=deadline, fps=fps[pending]
                )
            for i, ok in zip(pending, got, strict=True):
                if ok:
                    done[i], level_of[i] = True, tier
            pending = [i for i in pending if not done[i]]
        if pending:
            first_miss = pending[0]
            done[first_miss:] = [False] * (len(done) - first_miss)
        return done, level_of

    def _note_reads(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        done: Sequence[bool],
        level_of: Sequence[Tier | None],
        nbytes: int,
        epoch: int | None = None,
    ) -> list[int]:
        """Placement bookkeeping of a read (one placement call for a read whose pages were all
        served and known, ``TierPlacement.hit_batch``; else one per key read); returns the
        indexes of the pages to copy into DRAM from the caller's buffers. ``epoch``: the clear
        fence read when the read started; if a clear ran (or runs) since, the read is not told
        to the placement (nothing adopted, nothing promoted)."""
        if not self.state.local:
            return []
        # frozen, or the tenant being cleared: nothing is written, promotions included
        frozen = self.state.refuses_sets(keys[0])
        dram, ssd = self.state.dram, self.state.ssd  # one layout for the whole call
        hot = [
            bool(
                not frozen
                and done[i]
                and tier is not None
                and tier is not dram
                and dram is not None
                and tier.should_promote(key, ctxs[i])
            )
            for i, (key, tier) in enumerate(zip(keys, level_of, strict=True))
        ]
        promote: list[int] = []
        with self.state.lock:
            if epoch is not None and (epoch != self.state.clear_epoch or epoch & 1):
                self.state.counts["reads_across_clear"] += 1
                return []
            placement = self.state.placement_for(nbytes)
            self.state.forget_reclaimed(placement)
            # every page served and (usually) known: the policy told once
            if all(done) and placement.hit_batch(keys, ctxs, hot) is not None:
                tier_of = placement.tier_of
                return [i for i, key in enumerate(keys) if level_of[i] is not dram and tier_of(key) == DRAM]
            hit = placement.hit
            for i, key in enumerate(keys):
                tier = level_of[i]
                if not done[i]:
                    if tier is None and key in placement:
                        placement.remove(key)  # bookkeeping said resident, no tier served it
                    continue
                up = hot[i]
                before = hit(key, ctxs[i], up)
                if before is None:
                    if tier is dram or tier is ssd or up:
                        where = DRAM if tier is dram or up else SSD
                        if not placement.adopt(key, ctxs[i]._replace(promoted=True), where):
                            continue
                    else:
                        continue  # a pool hit that stays in the pool
                if tier is not dram and placement.tier_of(key) == DRAM:
                    promote.append(i)
        return promote
