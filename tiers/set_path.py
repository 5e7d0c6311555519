"""The set path of a ``TieredStore`` (``SetPath.put``), as its steps:

1. refuse: a frozen store, a tenant being cleared, a clear in progress: every page False (SGLang
   keeps it in its host pool); nothing is asked or written.
2. screen (``_screen``): a page whose key is stored already with another size is refused (False,
   counted ``refused_other_size``, logged once: values are immutable once committed, so another
   size under the same key is the caller's error); it goes to no tier. A page larger than a local
   tier can hold is False locally (counted as that tier's ``too_large``; logged once per size); a
   pool may still take it. The policy is not asked for either, so nothing moves for them.
3. decide (``_decide``): the placement is asked ONCE per key (``StoreState.decide_sets``); what it
   drops leaves both local tiers, DRAM overflow goes to the mover (``StoreState.apply``). With
   ``_COPY_FIRST_MIN`` or more new pages of one size, the new pages are first copied into free
   DRAM (as many as free slots hold), then the placement decides, and copies it does not want in
   DRAM are removed again: deciding first would demote to make room the copies then wait for.
4. write (``_write``): pages placed in DRAM are copied there, waiting for room up to the deadline
   (``with_dram_room``); pages placed on SSD (no DRAM tier) are written within the deadline. A
   page whose copy could not be made is unplaced (``_unplace``: a new page is forgotten, False; a
   page moving up from SSD stays placed on SSD).
5. publish (``_publish``): ``ssd_write_through`` queues an SSD copy of every new DRAM page; pool
   tiers get the pages they lack (write-through pools every page, the others the pages not kept
   locally), unless a clear started since the set began (counted ``pool_writes_skipped_clear``).

Per page, ``put`` answers True when a tier stored it or the policy refused it with no pool to take
it instead (a decision, not a failure: ``not_admitted``), False when it was not stored. Every wait
is bounded by the call's deadline. The clear fence (``StoreState.fence``) is read before any byte
is taken: a clear since then keeps the set's pages out of every tier.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import NamedTuple

import numpy as np

from hicache_mooncake.native import fingerprints

from .dram_tier import DramTier
from .mover import Mover
from .parts import Parts, pages_sizes
from .policy import AccessContext, ObjectType
from .policy.contexts import set_contexts
from .policy.placement import SetOutcome
from .store_state import StoreState

log = logging.getLogger(__name__)
_COPY_FIRST_MIN = 8
"""New pages per set from which they are copied into free DRAM before the placement decides."""
_TO_DRAM = (SetOutcome.NEW_DRAM, SetOutcome.UP)
_KEPT: tuple[bool | None, ...] = tuple(
    None if SetOutcome(value) == SetOutcome.REFUSED else True for value in range(len(SetOutcome))
)
"""A page's local answer, indexed by its ``SetOutcome`` (whose values are 0..n-1)."""


def _items(call: _LocalSet, idx: Sequence[int]) -> list[tuple[str, Parts, AccessContext]]:
    """``(key, parts, ctx)`` of the pages ``idx`` (distinct, in order) of a call, picked in
    C-level passes (no bytecode per page)."""
    if len(idx) == len(call.keys):
        return list(zip(call.keys, call.parts, call.ctxs, strict=True))
    return list(
        zip(
            map(call.keys.__getitem__, idx),
            map(call.parts.__getitem__, idx),
            map(call.ctxs.__getitem__, idx),
            strict=True,
        )
    )


def _moved_to_dram(outcomes: list[SetOutcome]) -> int:
    """How many outcomes place their page in DRAM (``_TO_DRAM``)."""
    return outcomes.count(SetOutcome.NEW_DRAM) + outcomes.count(SetOutcome.UP)


class _RoomAsk(NamedTuple):
    """What a room step is asked to make room for: the call's ``keys`` and ``ctxs``, the indices
    of the pages still ``missing`` a slot, the call's ``deadline`` and the mover of its layout."""

    keys: Sequence[str]
    ctxs: Sequence[AccessContext]
    missing: list[int]
    deadline: float
    mover: Mover | None


@dataclass
class _LocalSet:
    """One call's pages on their way into the local tiers (indices into the call's lists)."""

    keys: Sequence[str]
    parts: Sequence[Parts]
    ctxs: Sequence[AccessContext]
    sizes: Sequence[int]
    in_dram: np.ndarray
    """Whether DRAM held each key when the set began (bool, one per key)."""
    deadline: float
    fence: tuple[int | None, int | None]
    fps: np.ndarray
    """The keys' fingerprints (computed once per set, ``Tier``'s contract)."""
    outcomes: list[SetOutcome] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)
    """Keys the placement dropped while deciding (this call's own pages among them: not kept)."""
    landed: set[int] = field(default_factory=set)
    """Pages whose bytes are in DRAM now."""

    def subset(self, idx: Sequence[int]) -> _LocalSet:
        """The pages ``idx`` only (before any step ran: nothing decided or landed yet)."""
        return _LocalSet(
            [self.keys[i] for i in idx], [self.parts[i] for i in idx], [self.ctxs[i] for i in idx],
            [self.sizes[i] for i in idx], self.in_dram[list(idx)], self.deadline, self.fence,
            self.fps[list(idx)],
        )  # fmt: skip


class SetPath:
    def __init__(self, state: StoreState) -> None:
        self.state = state
        self._too_large_logged: set[int] = set()  # page sizes already warned about
        self._other_size_logged = False

    # ------------------------------------------------------------------ the whole set
    def put(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        prev_key: str | None,
        prefix_len: int | None,
        obj_type: ObjectType,
        deadline: float | None,
        supersedes: Sequence[str],
    ) -> list[bool]:
        """``TieredStore.put_batch`` (module docstring: the steps and their answers)."""
        state = self.state
        if not keys:
            return []
        if state.refuses_sets(keys[0]):
            state.counts["refused_frozen"] += len(keys)
            state.tenant_count(keys[0], set_pages=len(keys), set_refused_frozen=len(keys))
            return [False] * len(keys)
        epoch = state.clear_epoch
        if epoch & 1:  # a clear runs: nothing is published until it is done
            state.counts["refused_clearing"] += len(keys)
            return [False] * len(keys)
        fence = state.fence()
        sizes = pages_sizes(parts)
        ctxs = set_contexts(keys, prefix_len or 0, prev_key, sizes, obj_type=obj_type)
        fps = fingerprints(keys)
        held = self._dram_sizes(keys, fps)
        call = _LocalSet(keys, parts, ctxs, sizes, held >= 0, state.deadline(deadline), fence, fps)
        live = self._other_size(keys, sizes, held) if state.local else None
        if live is None:
            stored = self._store(call, supersedes, epoch)
        else:
            stored = [False] * len(keys)
            if live:
                for i, ok in zip(live, self._store(call.subset(live), supersedes, epoch), strict=True):
                    stored[i] = ok
        state.tenant_count(keys[0], set_pages=len(keys), set_stored_pages=sum(stored))
        return stored

    def _store(self, call: _LocalSet, supersedes: Sequence[str], epoch: int) -> list[bool]:
        """Local placement (steps 2-4), then the pools (step 5); per page whether it is stored."""
        state = self.state
        kept = self._put_local(call, supersedes) if state.local else [None] * len(call.keys)
        # kept: True placed locally, None not placed by decision (refused, or no local tier),
        # False a copy that could not be made in time; a refusal is a decision (True) unless a
        # pool was to take the page instead
        stored = list(
            map(operator.is_, kept, repeat(True))
            if state.pools
            else map(operator.is_not, kept, repeat(False))
        )
        self._copy_to_pools(call, kept, stored, epoch)
        return stored

    # ------------------------------------------------------------------ step 2: screen
    def _dram_sizes(self, keys: Sequence[str], fps: np.ndarray) -> np.ndarray:
        """DRAM's size of each key, -1 where absent (int64), in one index batch."""
        dram = self.state.dram
        if dram is None:
            return np.full(len(keys), -1, np.int64)
        return dram.stored_sizes(keys, fps)

    def _other_size(self, keys: Sequence[str], sizes: Sequence[int], in_dram: np.ndarray) -> list[int] | None:
        """Indices of the pages to store: None when all are (the usual set), else those whose key
        is not stored already with another size (the rest are refused: counted, logged once).
        ``in_dram``: DRAM's size of each key (-1: absent, ``_dram_sizes``); the SSD is asked only
        for keys the placement holds there (never for a new key). No per-key Python unless some
        key is held."""
        state = self.state
        ssd = state.ssd
        held = in_dram
        if ssd is not None and state.placement is not None:
            absent = np.flatnonzero(held < 0).tolist()
            if absent:
                placement = state.placement
                with state.lock:
                    flags = placement.placed_on_ssd(list(map(keys.__getitem__, absent)))
                on_ssd = list(compress(absent, flags))
                if on_ssd:
                    held = held.copy()
                    for i in on_ssd:
                        size = ssd.engine.object_size(keys[i])
                        held[i] = -1 if size is None else size
        if len(held) == 0 or held.max() < 0:  # nothing stored under these keys (the usual set)
            return None
        other = np.flatnonzero((held >= 0) & (held != np.asarray(sizes, np.int64))).tolist()
        if not other:
            return None
        state.counts["refused_other_size"] += len(other)
        if not self._other_size_logged:
            self._other_size_logged = True
            i = other[0]
            log.warning(
                "a set of %r with %d bytes is refused: the key is stored with %s bytes (values are "
                "immutable; another size under the same key is the caller's error; counted "
                "refused_other_size, logged once)",
                keys[i],
                sizes[i],
                held[i],
            )
        refused = set(other)
        return [i for i in range(len(keys)) if i not in refused]

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

    # ------------------------------------------------------------------ steps 2-4: the local tiers
    def _put_local(self, call: _LocalSet, supersedes: Sequence[str]) -> list[bool | None]:
        """Local placement of a set; per key: True placed, None refused by the policy (or dropped
        while making room), False no room in time or too large for a local tier (then the policy
        is not asked and nothing moves for it). ``call.fence``: ``StoreState.fence`` read when the
        set started (a clear since: nothing published)."""
        unfit = self.too_large(call.sizes)
        if not unfit:
            return self._place(call, supersedes)
        kept: list[bool | None] = [False] * len(call.keys)
        fit = [i for i in range(len(call.keys)) if i not in unfit]
        if fit:
            for i, k in zip(fit, self._place(call.subset(fit), supersedes), strict=True):
                kept[i] = k
        return kept

    def _place(self, call: _LocalSet, supersedes: Sequence[str]) -> list[bool | None]:
        """Steps 3 and 4 for pages every local tier can hold."""
        self._decide(call, supersedes)
        keys, outcomes, dropped = call.keys, call.outcomes, call.dropped
        kept = list(map(_KEPT.__getitem__, outcomes))
        if dropped:
            for i, key in enumerate(keys):
                if key in dropped:
                    kept[i] = None
        failed = self._write(call)
        if failed:
            self._unplace(call, failed, kept)
        if (mover := self.state.mover) is not None and self.state.options.ssd_write_through:
            if len(call.landed) == len(keys) and outcomes.count(SetOutcome.NEW_DRAM) == len(keys):
                mover.copy_later(list(keys))  # every page new and in DRAM (the usual set)
            else:
                mover.copy_later([keys[i] for i in sorted(call.landed) if outcomes[i] == SetOutcome.NEW_DRAM])
        return kept

    def _decide(self, call: _LocalSet, supersedes: Sequence[str]) -> None:
        """Step 3: one placement call per key (``call.outcomes``), its drops and demotions done.
        Copies made into free DRAM before deciding (many new pages) that the placement does not
        want there are removed again."""
        state = self.state
        dram, keys, sizes, n = state.dram, call.keys, call.sizes, len(call.keys)
        new = np.flatnonzero(~call.in_dram).tolist() if dram is not None else []
        copy_first = dram is not None and len(new) >= _COPY_FIRST_MIN
        if dram is not None and copy_first and sizes.count(sizes[0]) == n:
            # only as many as free slots hold now (the rest are copied once the placement has
            # made room: a copy that found no slot would count as refused, which it is not)
            new = new[: dram.free_objects(sizes[0])]
        if dram is not None and copy_first and new:
            ok = dram.put_batch(
                _items(call, new),
                call.deadline,
                call.fence[0],
                fps=call.fps if len(new) == n else call.fps[new],
            )
            call.landed = set(compress(new, ok))
        outcomes, drops, demote = state.decide_sets(keys, call.ctxs, sizes[0], supersedes)
        call.outcomes = outcomes
        call.dropped = {key for key, _tier in drops}
        if call.landed and dram is not None and (call.dropped or _moved_to_dram(outcomes) < n):
            unwanted = [i for i in call.landed if outcomes[i] not in _TO_DRAM or keys[i] in call.dropped]
            if unwanted:
                dram.remove_batch([keys[i] for i in unwanted], call.fps[unwanted])
                call.landed.difference_update(unwanted)
        state.apply(drops, demote)

    def _write(self, call: _LocalSet) -> list[int]:
        """Step 4: copy the pages placed in DRAM there (waiting for room up to the deadline) and
        write those placed on SSD; returns the pages whose copy could not be made."""
        state = self.state
        keys, outcomes, dropped = call.keys, call.outcomes, call.dropped
        failed: list[int] = []
        dram = state.dram
        if dram is not None and len(call.landed) < len(keys):  # else every page DRAM wants is in
            to_dram = [
                i
                for i, o in enumerate(outcomes)
                if o in _TO_DRAM and i not in call.landed and keys[i] not in dropped
            ]
            if to_dram:
                failed.extend(self._copy_into_dram(dram, call, to_dram))
        if SetOutcome.NEW_SSD in outcomes and (ssd := state.ssd) is not None:
            to_ssd = [i for i, o in enumerate(outcomes) if o == SetOutcome.NEW_SSD and keys[i] not in dropped]
            if to_ssd:
                ok = ssd.put_batch(_items(call, to_ssd), call.deadline, call.fence[1])
                failed.extend(i for i, good in zip(to_ssd, ok, strict=True) if not good)
        return failed

    def _copy_into_dram(self, dram: DramTier, call: _LocalSet, idx: list[int]) -> list[int]:
        """Copy pages ``idx`` into free DRAM (adding them to ``call.landed``); returns those that
        found no room in time. ``dram``: the tier the call started with (a runtime detach may
        have published a new layout since; the tier stays usable until the call ends)."""
        keys, ctxs = call.keys, call.ctxs

        def attempt(missing: list[int]) -> list[bool]:
            ok = dram.put_batch(_items(call, missing), call.deadline, call.fence[0], fps=call.fps[missing])
            call.landed.update(compress(missing, ok))
            return ok

        return self.with_dram_room(keys, ctxs, idx, attempt, call.deadline)

    def _unplace(self, call: _LocalSet, failed: Sequence[int], kept: list[bool | None]) -> None:
        """Pages whose copy could not be made in time: a new page is forgotten (False: SGLang
        keeps it in its host pool); a page moving up from SSD stays placed on SSD."""
        state = self.state
        with state.lock:
            placement = state.placement
            for i in failed:
                if call.outcomes[i] == SetOutcome.UP:
                    if placement is not None:
                        placement.leave_dram(call.keys[i])
                    continue
                kept[i] = False
                if placement is not None:
                    placement.remove(call.keys[i])
            state.counts["local_put_failed"] += len(failed)

    # ------------------------------------------------------------------ DRAM room (sets, served arenas)
    def with_dram_room(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        idx: list[int],
        attempt: Callable[[list[int]], list[bool]],
        deadline: float,
    ) -> list[int]:
        """Run ``attempt`` (take free DRAM slots for the pages ``idx``; per page whether it got one)
        until every page has one or the deadline passes; returns those without. Between attempts
        room is made, each way at most once per call, cheapest first:

        1. queued demotions run in this thread (``tiers.ssd.foreground_demotion``:
           ``Mover.make_room``);
        2. the placement frees room (deferred placement work settled first, so it knows every
           page DRAM holds): ``free_dram`` (the writing tenant's own pages first when it has a
           share, then its least recent DRAM pages are demoted, or victims dropped without an
           SSD); when the pages' size class has no free slot, no slab is free and slabs of other
           classes are in use, only pages that make room for that class leave
           (``DramTier.room_plan``, ``TierPlacement.free_dram_room``): none when none can. The
           demotions then run here. A served arena's reserve (the host cache) makes its room
           here before the commit tells the placement, so in a full DRAM-only store this step
           is where the policy's victims leave.
        """
        missing = self._attempt(attempt, idx)
        mover = self.state.mover  # one layout for the whole call (a runtime change publishes a new one)
        for make_room in (self._run_queued_demotions, self._free_dram):
            if not missing or time.monotonic() >= deadline:
                break
            if make_room(_RoomAsk(keys, ctxs, missing, deadline, mover)):
                missing = self._attempt(attempt, missing)
        return missing

    @staticmethod
    def _attempt(attempt: Callable[[list[int]], list[bool]], idx: list[int]) -> list[int]:
        ok = attempt(idx)
        return [i for i, good in zip(idx, ok, strict=True) if not good]

    def _run_queued_demotions(self, ask: _RoomAsk) -> bool:
        """Room step 1: queued demotions in this thread (when ``wait_for_room`` is on); False
        when there is no such step (nothing changed: no second attempt)."""
        state, mover = self.state, ask.mover
        if mover is None or not state.options.wait_for_room:
            return False
        state.counts["waits_for_room"] += 1
        mover.make_room(ask.ctxs[ask.missing[0]].size, len(ask.missing), ask.deadline)
        return True

    def _free_dram(self, ask: _RoomAsk) -> bool:
        """Room step 2: the placement frees DRAM for the pages ``missing`` (one placement call)."""
        state = self.state
        keys, ctxs, missing, deadline, mover = ask
        state.settle_deferred(deadline)
        size = ctxs[missing[0]].size
        # short of slots, not bytes: only pages that make room for this class leave
        plan = dram.room_plan(size) if (dram := state.dram) is not None else None
        strays: list[str] = []
        with state.lock:
            placement = state.placement_for(size)
            if plan is None:
                drops, demote = placement.free_dram(sum(ctxs[i].size for i in missing), keys[missing[0]])
            else:
                drops, demote, strays = placement.free_dram_room(plan, len(missing), keys[missing[0]])
        if strays and dram is not None:
            dram.remove_batch(strays)  # DRAM held them, the placement did not know them
        state.apply(drops, demote)
        if demote and mover is not None and state.options.wait_for_room:
            mover.make_room(size, len(missing), deadline)
        return True

    # ------------------------------------------------------------------ step 5: publish to the pools
    def _copy_to_pools(
        self, call: _LocalSet, kept: Sequence[bool | None], stored: list[bool], epoch: int
    ) -> None:
        """Write-through pools get every page they lack; the others the pages not kept locally
        (``stored`` updated in place). ``epoch``: the clear fence when the set began (a clear
        since: the pages stay out)."""
        state = self.state
        keys, parts, ctxs, deadline = call.keys, call.parts, call.ctxs, call.deadline
        for pool in state.pools:
            want = [i for i, k in enumerate(kept) if pool.write_through or k is not True]
            if not want:
                continue
            if state.clear_epoch != epoch:  # a clear since the set began: its pages stay out
                state.counts["pool_writes_skipped_clear"] += len(want)
                break
            if pool.put_skips_present:
                found = [False] * len(want)
            else:
                found = pool.contains_batch([keys[i] for i in want])
            todo = [i for i, f in zip(want, found, strict=True) if not f]
            if todo:
                results = pool.put_batch([(keys[i], parts[i], ctxs[i]) for i in todo], deadline=deadline)
                for i, ok in zip(todo, results, strict=True):
                    stored[i] = stored[i] or ok
            for i, f in zip(want, found, strict=True):
                stored[i] = stored[i] or f
