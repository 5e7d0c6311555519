"""Changing a ``TieredStore`` while SGLang's threads keep calling it (``RuntimeOps``): attach a
tier, detach one (``drain``: its pages move down or out first; ``drop``: at once), resize the DRAM
or SSD tier, freeze writes, clear one tenant. The store's methods of the same names run these.

Every operation runs under ``StoreState.changes`` (one at a time), is bounded by an absolute
``deadline`` (``time.monotonic()``) and reports through a ``Progress``. What an operation could not
finish by its deadline is reported, never left inconsistent: a tier is closed only after the
placement forgot what it held, and the data path never waits for an operation (the store lock is
held only for bookkeeping, in chunks of at most ``_CHUNK`` keys).

The order that keeps every call consistent (see ``tiered_store``'s docstring): the placement's
capacities change before a tier's role does, so a call never gets a decision for a tier it cannot
see; a removed tier leaves the published ``TierLayout`` before its pages are forgotten for good,
and is closed only after the calls that still held it are over (``CallGate.quiesce``, bounded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from .dram_tier import DramTier
from .layout import TierLayout
from .mover import Mover
from .policy import DEFAULT_CONTEXT, AccessContext
from .policy.placement import DRAM, SSD
from .progress import Progress
from .rewarm import WarmKeeper
from .ssd_tier import SsdTier
from .store_state import StoreState
from .tier import Tier

log = logging.getLogger(__name__)
_CHUNK = 4096  # keys per hold of the store lock
_COPY_BATCH = 32  # pages per read/write batch when pages move between tiers
MODES = ("drain", "drop")


class OperationError(ValueError):
    """An operation that cannot run as asked (unknown tier, a second DRAM tier, bad size...)."""


def tier_rank(tier: Tier) -> int:
    """Read order: DRAM, then pools (remote DRAM), then SSD (the builders' order)."""
    return 0 if isinstance(tier, DramTier) else 2 if isinstance(tier, SsdTier) else 1


def _chunks(keys: Sequence[str], size: int = _CHUNK) -> Iterator[Sequence[str]]:
    for start in range(0, len(keys), size):
        yield keys[start : start + size]


class RuntimeOps:
    def __init__(self, state: StoreState, warm: WarmKeeper | None = None) -> None:
        self.state = state
        self.warm = warm

    # ------------------------------------------------------------------ shared steps
    def _open(self) -> None:
        """Refuse to start (or go on with) a change of a store that is closing."""
        if self.state.closed:
            raise OperationError("the store is closing")

    def _find(self, name: str) -> Tier:
        tier = next((t for t in self.state.tiers if t.name == name), None)
        if tier is None:
            raise OperationError(f"no tier named {name!r}; tiers: {', '.join(self.state.layout.names())}")
        return tier

    def _publish(self, lay: TierLayout, deadline: float) -> bool:
        """Make ``lay`` the store's layout; True once no call started before it still runs."""
        store = self.state
        store.layout = lay
        gen = store.gate.advance()
        quiet = store.gate.quiesce(gen, max(deadline, time.monotonic() + store.options.timeout_s))
        if not quiet:
            store.counts["quiesce_timeouts"] += 1
        return quiet

    def _refit(self, lay: TierLayout) -> None:
        """The placement's capacities for the tiers of ``lay`` (pages over them go now)."""
        store = self.state
        store.capacity = None  # a fixed capacity holds until the tiers change
        with store.lock:
            placement = store.placement
            if placement is None:
                return
            placement.resize(*store.capacities(lay, store.unit))
            drops, demote = placement.settle()
        store.apply(drops, demote)

    def _forget(self, keys: Sequence[str], only_tier: str | None = None) -> int:
        """Remove ``keys`` from the placement (those placed in ``only_tier``, if given), in chunks."""
        store = self.state
        forgotten = 0
        for chunk in _chunks(keys):
            with store.lock:
                placement = store.placement
                if placement is None:
                    return 0
                for key in chunk:
                    tier = placement.tier_of(key)
                    if tier is not None and (only_tier is None or tier == only_tier):
                        placement.remove(key)
                        forgotten += 1
        return forgotten

    def _resident(self) -> list[str]:
        with self.state.lock:
            placement = self.state.placement
            return placement.resident_keys() if placement is not None else []

    def _copy_down(self, source: Tier, keys: Sequence[str], sizes: Sequence[int], deadline: float) -> int:
        """Copy pages ``keys`` from ``source`` into the pools that lack them (a tier drained with
        nothing local below it); returns the pages copied. Bounded by ``deadline``."""
        pools = [p for p in self.state.pools if p is not source]
        copied = 0
        for start in range(0, len(keys), _COPY_BATCH):
            if time.monotonic() >= deadline or not pools or self.state.closed:
                break
            batch = list(keys[start : start + _COPY_BATCH])
            bufs = [np.empty(n, dtype=np.uint8) for n in sizes[start : start + _COPY_BATCH]]
            got = source.get_batch_into(
                [(k, [b.data], DEFAULT_CONTEXT) for k, b in zip(batch, bufs, strict=True)], deadline
            )
            items = [(k, [b.data], DEFAULT_CONTEXT) for k, b, ok in zip(batch, bufs, got, strict=True) if ok]
            for pool in pools:
                if items:
                    copied += sum(pool.put_batch(items, deadline))
        return copied

    # ------------------------------------------------------------------ attach
    def attach(self, tier: Tier, progress: Progress, deadline: float) -> None:
        """Add ``tier`` (built by the caller, e.g. from a YAML section by the store builder).
        Calls see it at once; the placement gives it its share right after."""
        store = self.state
        with store.changes:
            self._open()
            lay = store.layout
            if isinstance(tier, DramTier) and lay.dram is not None:
                raise OperationError("a DRAM tier is attached already (resize it instead)")
            if isinstance(tier, SsdTier) and lay.ssd is not None:
                raise OperationError("an SSD tier is attached already (detach it first)")
            if any(t.name == tier.name for t in lay.tiers):
                raise OperationError(f"a tier named {tier.name!r} is attached already")
            progress.phase("publish")
            if store.regions:
                tier.register_memory(store.regions)
            new = TierLayout.of(sorted((*lay.tiers, tier), key=tier_rank))
            mover = lay.mover
            if mover is None and new.dram is not None and new.ssd is not None:
                mover = Mover(new.dram, new.ssd, store, timeout_s=store.options.timeout_s)
                if store.frozen:
                    mover.pause()
            if isinstance(tier, SsdTier):
                store.hook_ssd(tier)
            self._publish(replace(new, mover=mover), deadline)
            progress.phase("placement")
            self._refit(new)
            if isinstance(tier, SsdTier) and self.warm is not None:
                progress.phase("warm restart")
                progress.note(**self.warm.restore(tier))
            progress.note(tiers=store.layout.names())

    # ------------------------------------------------------------------ detach
    def detach(self, name: str, mode: str, progress: Progress, deadline: float) -> None:
        if mode not in MODES:
            raise OperationError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        store = self.state
        with store.changes:
            self._open()
            tier = self._find(name)
            lay = store.layout
            if len(lay.tiers) == 1:
                raise OperationError(
                    f"{name!r} is the only tier; detach the whole backend instead "
                    "(SGLang: DELETE /hicache/storage-backend)"
                )
            rest = TierLayout.of([t for t in lay.tiers if t is not tier])
            if tier is lay.dram:
                self._detach_dram(lay, rest, mode, progress, deadline)
            elif tier is lay.ssd:
                self._detach_ssd(lay, rest, mode, progress, deadline)
            else:
                progress.phase("unpublish")
                self._publish(rest, deadline)
                tier.close()
            progress.note(tiers=rest.names())

    def _detach_dram(
        self, lay: TierLayout, rest: TierLayout, mode: str, progress: Progress, deadline: float
    ) -> None:
        store = self.state
        dram = lay.dram
        assert dram is not None
        if mode == "drain" and lay.mover is not None:
            total = len(dram.keys())
            progress.phase("demote to ssd", total, "pages")
            self._refit(rest)  # no DRAM share: every DRAM page is demoted, new pages go to SSD
            while (left := len(dram.keys())) and time.monotonic() < deadline and not store.closed:
                progress.advance(max(total - left, 0))
                time.sleep(0.02)
            left = len(dram.keys())
            progress.advance(max(total - left, 0))
            progress.note(pages_moved_down=max(total - left, 0), dram_pages_left=left)
        elif mode == "drain" and rest.pools:
            keys = dram.keys()
            progress.phase("copy to pool", len(keys), "pages")
            pinned = dram.pin_entries(keys)
            sizes = [p.nbytes if p is not None else 0 for p in pinned]
            dram.release([p for p in pinned if p is not None])
            progress.note(pages_copied=self._copy_down(dram, keys, sizes, deadline))
        if lay.mover is not None:
            lay.mover.close()
        self._refit(rest)
        progress.phase("unpublish")
        self._publish(rest, deadline)
        progress.phase("forget")
        held = dram.keys()
        on_ssd = rest.ssd.contains_batch(held) if rest.ssd is not None else [False] * len(held)
        dropped = self._forget([k for k, ok in zip(held, on_ssd, strict=True) if not ok])
        progress.note(pages_dropped=dropped)
        dram.close()

    def _detach_ssd(
        self, lay: TierLayout, rest: TierLayout, mode: str, progress: Progress, deadline: float
    ) -> None:
        store = self.state
        ssd = lay.ssd
        assert ssd is not None
        if mode == "drain":
            if self.warm is not None:
                progress.phase("snapshot")
                progress.note(snapshot_entries=self.warm.save(ssd))
            if lay.mover is not None:
                progress.phase("finish demotions")
                lay.mover.flush(max(0.0, deadline - time.monotonic()))
            if rest.pools:
                with store.lock:
                    placement = store.placement
                    keys = (
                        [k for k in placement.resident_keys() if placement.tier_of(k) == SSD]
                        if placement
                        else []
                    )
                sizes = [ssd.engine.object_size(k) or 0 for k in keys]
                progress.phase("copy to pool", len(keys), "pages")
                progress.note(pages_copied=self._copy_down(ssd, keys, sizes, deadline))
        if lay.mover is not None:
            lay.mover.close()
        with store.lock:  # no demotions while the SSD's pages are forgotten (DRAM may fill up)
            placement = store.placement
            if placement is not None:
                _total, dram_full, _low = store.capacities(rest, store.unit)
                placement.resize(placement.capacity, min(dram_full, placement.capacity), None)
        progress.phase("forget", 0, "pages")
        dropped = self._forget(self._resident(), only_tier=SSD)
        self._refit(rest)
        progress.phase("unpublish")
        self._publish(rest, deadline)
        dropped += self._forget(self._resident(), only_tier=SSD)  # placed there by calls in flight
        progress.note(pages_dropped=dropped, dram_pages_adopted=self._adopt_dram_orphans(rest))
        store.unhook_ssd(ssd)
        ssd.close()

    def _adopt_dram_orphans(self, lay: TierLayout) -> int:
        """DRAM pages the placement no longer knows (demotions queued when the mover stopped):
        placed in DRAM again, or removed when the policy does not keep them."""
        store = self.state
        if lay.dram is None:
            return 0
        with store.lock:
            placement = store.placement
            orphans = [k for k in lay.dram.keys() if placement is not None and placement.tier_of(k) is None]
        if not orphans:
            return 0
        pinned = lay.dram.pin_entries(orphans)
        sizes = [p.nbytes if p is not None else 0 for p in pinned]
        lay.dram.release([p for p in pinned if p is not None])
        adopted = 0
        for start in range(0, len(orphans), _CHUNK):
            with store.lock:
                placement = store.placement
                assert placement is not None
                for key, size in zip(
                    orphans[start : start + _CHUNK], sizes[start : start + _CHUNK], strict=True
                ):
                    if size and placement.tier_of(key) is None:
                        adopted += placement.adopt(key, AccessContext(size=size), DRAM)
                drops, demote = placement.settle()
            store.apply(drops, demote)
        return adopted

    # ------------------------------------------------------------------ resize
    def resize(self, name: str, capacity: int, progress: Progress, deadline: float) -> None:
        store = self.state
        with store.changes:
            self._open()
            tier = self._find(name)
            lay = store.layout
            if tier is lay.dram:
                self._resize_dram(lay, capacity, progress, deadline)
            elif tier is lay.ssd:
                self._resize_ssd(lay, capacity, progress, deadline)
            else:
                raise OperationError(
                    f"tier {name!r} cannot be resized from here (a pool's size is its nodes')"
                )

    def _resize_dram(self, lay: TierLayout, capacity: int, progress: Progress, deadline: float) -> None:
        dram = lay.dram
        assert dram is not None
        before = dram.capacity_bytes
        try:
            after = dram.resize(capacity)
        except ValueError as exc:
            raise OperationError(str(exc)) from None
        progress.note(capacity_before=before, capacity=after)
        self._refit(lay)  # shrinking: the least recent DRAM pages are demoted (or dropped) now
        total = dram.retired_slabs_in_use
        progress.phase("empty retired slabs", total, "slabs")
        stuck_rounds = 0
        while (left := dram.retired_slabs_in_use) and time.monotonic() < deadline and not self.state.closed:
            progress.advance(total - left)
            keys = dram.retired_keys(limit=256)
            moved = dram.relocate(keys)
            stuck = [k for k, ok in zip(keys, moved, strict=True) if not ok]
            progress.add(pages_relocated=sum(moved))
            stuck_rounds = stuck_rounds + 1 if stuck or not keys else 0
            if stuck and stuck_rounds > 3:
                progress.add(pages_moved_out=self._move_out(lay, stuck))
            if stuck or not keys:
                time.sleep(0.01)  # demotions free slots; readers release pinned ones
        progress.advance(total - dram.retired_slabs_in_use)
        progress.note(released_slabs=total - dram.retired_slabs_in_use)

    def _move_out(self, lay: TierLayout, keys: Sequence[str]) -> int:
        """DRAM pages that found no slot below a shrink: demoted to SSD, or dropped without one."""
        store = self.state
        assert lay.dram is not None
        demote: list[str] = []
        drop: list[str] = []
        with store.lock:
            placement = store.placement
            for key in keys:
                where = placement.tier_of(key) if placement is not None else None
                if where == DRAM and lay.mover is not None:
                    placement.leave_dram(key)  # type: ignore[union-attr]
                    demote.append(key)
                elif where is None or lay.mover is None:
                    if placement is not None:
                        placement.remove(key)
                    drop.append(key)
        if demote and lay.mover is not None:
            lay.mover.demote_later(demote)
        lay.dram.remove_batch(drop)
        return len(demote) + len(drop)

    def _resize_ssd(self, lay: TierLayout, capacity: int, progress: Progress, deadline: float) -> None:
        ssd = lay.ssd
        assert ssd is not None
        engine = ssd.engine
        before = engine.capacity_bytes
        try:
            engine.resize(capacity, time.monotonic())  # the new size, nothing vacated yet
        except ValueError as exc:
            raise OperationError(str(exc)) from None
        after = engine.capacity_bytes
        progress.note(capacity_before=before, capacity=after)
        self._refit(lay)  # shrinking: the policy's victims leave first, so the rest fits
        if after >= before:
            return
        step = engine.resize(capacity, time.monotonic())
        progress.phase("empty regions past the new size", step.total, "regions")
        while not step.done and time.monotonic() < deadline and not self.state.closed:
            step = engine.resize(capacity, min(deadline, time.monotonic() + 0.5))
            progress.advance(progress.snapshot()["total"] - step.left)
            progress.add(regions_reclaimed=step.reclaimed, region_files_removed=step.files_removed)
        progress.note(regions_left=step.left)

    # ------------------------------------------------------------------ freeze
    def freeze(self, frozen: bool) -> None:
        """Refuse (``True``) or accept again (``False``) new pages; while frozen nothing is
        written to any tier (sets are False, no promotion, demotions wait) and reads are served.
        Freezing returns once every data call that started before it is over (a set already past
        the check could still place pages), or after ``io.timeout_s`` (counted in
        ``quiesce_timeouts``): from then on nothing new is placed."""
        store = self.state
        with store.changes:
            store.frozen = frozen
            mover = store.mover
            if mover is not None:
                (mover.pause if frozen else mover.resume)()
            if frozen and not store.gate.quiesce(
                store.gate.advance(), time.monotonic() + store.options.timeout_s
            ):
                store.counts["quiesce_timeouts"] += 1

    # ------------------------------------------------------------------ tenants
    def clear_tenant(self, tenant: str, progress: Progress, deadline: float) -> None:
        """Remove every page of ``tenant`` from every local tier (and from the pools, for the pages
        known here). The tenant's sets are refused while it runs; other tenants are untouched.

        A barrier for the tenant's pages: the tenant is marked and the store's ``tenant_fence``
        bumped (under the store lock); a first sweep removes its pages; then everything that may
        have taken one of its pages before the mark finishes (data calls, served commits and
        lookups included: ``CallGate.quiesce``; the mover's batch in flight, with the mover held
        until the end; the store's deferred work, pool copies of served commits included); then a
        final sweep removes what they published; then the fence is bumped again. A served
        reservation made before the mark is refused at its commit (``tenants_cleared_since``).
        Waits are bounded by ``deadline``; one that runs out is counted (``quiesce_timeouts``)."""
        store = self.state
        with store.changes:
            self._open()
            store.begin_tenant_clear(tenant)  # from now on: no set, no promotion of its pages
            mover = store.mover
            held = mover is not None and not mover.paused
            try:
                removed = left = 0
                for sweep in ("remove", "final sweep"):
                    if sweep == "final sweep":
                        self._wait_for_takers(mover, held, deadline)
                    todo = self._tenant_keys(tenant)
                    progress.phase(sweep, len(todo), "pages")
                    done = self._remove_keys(todo, progress, deadline)
                    removed, left = removed + done, len(todo) - done
                progress.note(pages_removed=removed, pages_left=left)
            finally:
                store.end_tenant_clear(tenant)
                if held and mover is not None:
                    mover.resume()

    def _wait_for_takers(self, mover: Mover | None, hold: bool, deadline: float) -> None:
        """Wait (until ``deadline``) for everything that may have taken a page before a tenant was
        marked: data calls that started before (a read could copy a page up into DRAM), the
        mover's batch in flight (a demotion or copy pinned before; with ``hold`` the mover is
        paused, ``clear_tenant`` resumes it), then the store's deferred work."""
        store = self.state
        ok = store.gate.quiesce(store.gate.advance(), deadline)
        if mover is not None:
            if hold:
                mover.pause()
            while mover.busy and time.monotonic() < deadline:  # the batch in flight finishes
                time.sleep(0.005)
            ok = ok and not mover.busy
        store.settle_deferred(deadline)
        if not ok:
            store.counts["quiesce_timeouts"] += 1

    def _tenant_keys(self, tenant: str) -> list[str]:
        """Every key of ``tenant`` the placement, the DRAM tier or the SSD tier knows."""
        lay = self.state.layout
        owned = self.state.tenant_of
        keys = {k for k in self._resident() if owned(k) == tenant}
        if lay.dram is not None:
            keys.update(k for k in lay.dram.keys() if owned(k) == tenant)
        if lay.ssd is not None:
            keys.update(k for k in lay.ssd.engine.keys() if owned(k) == tenant)
        return sorted(keys)

    def _remove_keys(self, keys: Sequence[str], progress: Progress, deadline: float) -> int:
        """Remove ``keys`` from the placement and every tier (pools included), in chunks, until
        the deadline; returns how many were handled."""
        lay = self.state.layout
        removed = 0
        for chunk in _chunks(keys, 512):
            if time.monotonic() >= deadline or self.state.closed:
                break
            self._forget(chunk)
            if lay.dram is not None:
                lay.dram.remove_batch(chunk)
            for tier in (lay.ssd, *lay.pools):
                if tier is not None:
                    tier.remove_batch(chunk)
            removed += len(chunk)
            progress.advance(removed)
        return removed
