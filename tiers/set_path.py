"""The set path of a ``TieredStore``: local placement of new pages (``SetPath.put_local``) and the
DRAM room a set or a served reservation waits for (``SetPath.with_dram_room``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from itertools import compress
from operator import not_

from .dram_tier import DramTier
from .parts import Parts
from .policy import AccessContext
from .policy.placement import SetOutcome
from .store_state import StoreState

log = logging.getLogger(__name__)
# new pages per set from which they are copied into free DRAM before the placement decides
_COPY_FIRST_MIN = 8
_TO_DRAM = (SetOutcome.NEW_DRAM, SetOutcome.UP)
_KEPT: tuple[bool | None, ...] = tuple(
    None if SetOutcome(value) == SetOutcome.REFUSED else True for value in range(len(SetOutcome))
)
"""``put_local``'s answer for a page, indexed by its ``SetOutcome`` (whose values are 0..n-1)."""


class SetPath:
    def __init__(self, state: StoreState) -> None:
        self.state = state
        self._too_large_logged: set[int] = set()  # page sizes already warned about

    def put_local(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        ctxs: Sequence[AccessContext],
        sizes: Sequence[int],
        deadline: float,
        supersedes: Sequence[str] = (),
        fence: tuple[int | None, int | None] = (None, None),
    ) -> list[bool | None]:
        """Local placement of a set; per key: True placed, None refused, False no room in time
        or too large for a local tier (then the policy is not asked and nothing moves for it).
        ``fence``: ``_fence()`` read when the set started (a clear since: nothing published)."""
        unfit = self.too_large(sizes)
        if unfit:
            fit = [i for i in range(len(keys)) if i not in unfit]
            kept: list[bool | None] = [False] * len(keys)
            if fit:
                placed = self.put_local(
                    [keys[i] for i in fit], [parts[i] for i in fit], [ctxs[i] for i in fit],
                    [sizes[i] for i in fit], deadline, supersedes, fence,
                )  # fmt: skip
                for i, k in zip(fit, placed, strict=True):
                    kept[i] = k
            return kept
        dram, n = self.state.dram, len(keys)
        in_dram = dram.contains_batch(keys) if dram is not None else [False] * n
        new = list(compress(range(n), map(not_, in_dram)))
        landed: set[int] = set()
        copy_first = len(new) >= _COPY_FIRST_MIN
        if dram is not None and copy_first and sizes.count(sizes[0]) == n:
            # only as many as free slots hold now (the rest are copied once the placement has
            # made room: a copy that found no slot would count as refused, which it is not)
            new = new[: dram.free_objects(sizes[0])]
        if dram is not None and copy_first and new:
            # the new pages go into free DRAM first, then the placement decides; copies it does
            # not want there are removed again (deciding first demotes to make room the copies
            # then wait for, and pages were lost on their way to the SSD)
            items = (
                list(zip(keys, parts, ctxs, strict=True))
                if len(new) == n
                else [(keys[i], parts[i], ctxs[i]) for i in new]
            )
            ok = dram.put_batch(items, deadline, fence[0])
            outcomes, drops, demote = self.state.decide_sets(keys, ctxs, sizes[0], supersedes)
            landed = set(compress(new, ok))
            dropped = {key for key, _tier in drops}
            if dropped or not all(map(_TO_DRAM.__contains__, outcomes)):
                unwanted = [i for i in landed if outcomes[i] not in _TO_DRAM or keys[i] in dropped]
                dram.remove_batch([keys[i] for i in unwanted])
                landed.difference_update(unwanted)
        else:
            outcomes, drops, demote = self.state.decide_sets(keys, ctxs, sizes[0], supersedes)
        self.state.apply(drops, demote)
        dropped = {key for key, _tier in drops}
        to_dram: list[int] = []
        if len(landed) < n:  # else every page that DRAM wants is in
            wanted = compress(range(n), map(_TO_DRAM.__contains__, outcomes))
            to_dram = [i for i in wanted if i not in landed and keys[i] not in dropped]
        to_ssd: list[int] = []
        if SetOutcome.NEW_SSD in outcomes:
            to_ssd = [i for i, o in enumerate(outcomes) if o == SetOutcome.NEW_SSD and keys[i] not in dropped]
        failed: list[int] = []
        kept = list(map(_KEPT.__getitem__, outcomes))
        if dropped:
            for i, key in enumerate(keys):
                if key in dropped:
                    kept[i] = None
        if to_dram and dram is not None:
            failed.extend(self.copy_into_dram(dram, keys, parts, ctxs, to_dram, landed, deadline, fence[0]))
        if to_ssd and (ssd := self.state.ssd) is not None:
            ok = ssd.put_batch([(keys[i], parts[i], ctxs[i]) for i in to_ssd], deadline, fence[1])
            failed.extend(i for i, good in zip(to_ssd, ok, strict=True) if not good)
        if failed:
            self.unplace(keys, outcomes, failed, kept)
        if (mover := self.state.mover) is not None and self.state.options.ssd_write_through:
            mover.copy_later([keys[i] for i in sorted(landed) if outcomes[i] == SetOutcome.NEW_DRAM])
        return kept

    def too_large(self, sizes: Sequence[int]) -> set[int]:
        """Indices of pages some local tier cannot hold at all (larger than DRAM's slab, than an
        SSD region): counted by each such tier as its own ``too_large`` refusal, logged once per
        size with the limits."""
        lay = self.state.layout
        local = [t for t in (lay.dram, lay.ssd) if t is not None]
        if not local:
            return set()
        unfit = set()
        for size in set(sizes):
            short = [t for t in local if not t.fits(size)]
            if not short:
                continue
            idx = [i for i, s in enumerate(sizes) if s == size]
            unfit.update(idx)
            for tier in short:
                tier.count_too_large(len(idx))
            if size not in self._too_large_logged:
                self._too_large_logged.add(size)
                log.warning(
                    "pages of %d bytes are not stored locally: larger than the %s tier can hold "
                    "(DRAM: its slab size; SSD: a region minus its headers)",
                    size, " and ".join(t.name for t in short),
                )  # fmt: skip
        return unfit

    def copy_into_dram(
        self,
        dram: DramTier,
        keys: Sequence[str],
        parts: Sequence[Parts],
        ctxs: Sequence[AccessContext],
        idx: list[int],
        landed: set[int],
        deadline: float,
        generation: int | None = None,
    ) -> list[int]:
        """Copy pages ``idx`` into free DRAM (adding them to ``landed``); returns those that found
        no room in time (``with_dram_room``). ``dram``: the tier the call started with (a runtime
        detach may have published a new layout since; the tier stays usable until the call ends).
        ``generation``: DRAM's clear fence when the set started (``DramTier.put_batch``)."""

        def attempt(missing: list[int]) -> list[bool]:
            ok = dram.put_batch([(keys[i], parts[i], ctxs[i]) for i in missing], deadline, generation)
            landed.update(i for i, good in zip(missing, ok, strict=True) if good)
            return ok

        return self.with_dram_room(keys, ctxs, idx, attempt, deadline)

    def with_dram_room(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        idx: list[int],
        attempt: Callable[[list[int]], list[bool]],
        deadline: float,
    ) -> list[int]:
        """Run ``attempt`` (take free DRAM slots for the pages ``idx``) until every page has one or
        the deadline passes; returns those without. When DRAM has no free slot, queued demotions
        run in this thread (``wait_for_room``) and, if DRAM is still full, the placement frees room
        (``free_dram``: the writing tenant's own pages first when it has a share, then its least
        recent DRAM pages are demoted, or victims dropped without an SSD). When the pages' size
        class has no free slot and no slab is free, only pages that make room leave
        (``DramTier.room_plan``, ``TierPlacement.free_dram_room``): none when none can."""
        missing = idx
        mover = self.state.mover  # one layout for the whole call (a runtime change publishes a new one)
        for step in range(3):
            if step == 1 and mover is not None and self.state.options.wait_for_room:
                self.state.counts["waits_for_room"] += 1
                mover.make_room(ctxs[missing[0]].size, len(missing), deadline)
            elif step == 2:
                self.state.settle_deferred(deadline)
                size = ctxs[missing[0]].size
                # short of slots, not bytes: only pages that make room for this class leave
                plan = dram.room_plan(size) if (dram := self.state.dram) is not None else None
                strays: list[str] = []
                with self.state.lock:
                    placement = self.state.placement_for(size)
                    if plan is None:
                        drops, demote = placement.free_dram(
                            sum(ctxs[i].size for i in missing), keys[missing[0]]
                        )
                    else:
                        drops, demote, strays = placement.free_dram_room(plan, len(missing), keys[missing[0]])
                if strays and dram is not None:
                    dram.remove_batch(strays)  # DRAM held them, the placement did not know them
                self.state.apply(drops, demote)
                if demote and mover is not None and self.state.options.wait_for_room:
                    mover.make_room(ctxs[missing[0]].size, len(missing), deadline)
            ok = attempt(missing)
            missing = [i for i, good in zip(missing, ok, strict=True) if not good]
            if not missing or time.monotonic() >= deadline:
                break
        return missing

    def unplace(
        self,
        keys: Sequence[str],
        outcomes: Sequence[SetOutcome],
        failed: Sequence[int],
        kept: list[bool | None],
    ) -> None:
        """Pages whose copy could not be made in time: a new page is forgotten (False: SGLang
        keeps it in its host pool); a page moving up from SSD stays placed on SSD."""
        with self.state.lock:
            placement = self.state.placement
            for i in failed:
                if outcomes[i] == SetOutcome.UP:
                    if placement is not None:
                        placement.leave_dram(keys[i])
                    continue
                kept[i] = False
                if placement is not None:
                    placement.remove(keys[i])
            self.state.counts["local_put_failed"] += len(failed)
