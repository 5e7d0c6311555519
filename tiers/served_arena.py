"""The store served to clients that copy bytes themselves (the host cache, memory nodes:
``arena_store.ArenaStore`` speaks the wire protocol, this does the store's side).

- ``reserve_batch`` hands out DRAM slots (room is made as for a set:
  ``SetPath.with_dram_room``), ``commit_batch`` publishes them and asks the placement
  (``TierPlacement.set``, one call per key, exactly as a set), ``abort_batch`` gives them back;
- ``locate_batch`` answers where pages live in DRAM, after bringing SSD or pool hits into reserved
  DRAM slots within the deadline (placement ``hit``, promoted).

One policy decides for every client: this face holds the same ``StoreState`` (placement, mover,
lock and counters) as the ``TieredStore`` that serves in-process calls, and uses its bookkeeping
steps (``store_state``) and the set path's DRAM room (``set_path``). Placement work after a commit
or an all-DRAM lookup runs on the store's worker, after the reply, so it costs the client nothing.
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Callable, Sequence
from itertools import compress

from .dram_tier import DramTier, Located, Reservation
from .policy import AccessContext, ObjectType
from .policy.contexts import get_contexts
from .policy.placement import DRAM, SetOutcome
from .set_path import SetPath
from .store_state import StoreState
from .tier import Tier

log = logging.getLogger(__name__)
_TAG = operator.attrgetter("tag")


class ServedArena:
    def __init__(self, state: StoreState, set_path: SetPath) -> None:
        self.state = state
        self.set_path = set_path

    def reserve_batch(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], deadline: float | None = None
    ) -> list[Reservation | bool]:
        """DRAM slots for pages a client copies in itself. Per key: True when DRAM holds it
        already (nothing to copy; the set is told to the placement now), a ``Reservation`` to fill
        and then ``commit_batch`` or ``abort_batch``, False when no room was found in time.
        ``ctxs``: the set contexts (``set_contexts``), sizes included."""
        if self.state.dram is None or not keys:
            return [False] * len(keys)
        if self.state.refuses_sets(keys[0]):
            # frozen (admin freeze), or the tenant is being cleared: refused as ``put_batch`` does
            self.state.counts["refused_frozen"] += len(keys)
            return [False] * len(keys)
        dram = self.state.dram
        deadline = self.state.deadline(deadline)
        tag = self.state.tenant_fence  # before any slot: a tenant clear since refuses the commit
        held = self._held_same_size(dram, keys, ctxs)
        out: list[Reservation | bool] = list(held)
        old = [i for i, h in enumerate(held) if h]
        if old:
            _outcomes, drops, demote = self.state.decide_sets(
                [keys[i] for i in old], [ctxs[i] for i in old], ctxs[old[0]].size
            )
            self.state.apply(drops, demote)
        got: dict[int, Reservation] = {}
        attempt = self._reserver(dram, keys, ctxs, got, tag)
        new = [i for i, h in enumerate(held) if not h]
        if new:
            new = self._fitting(dram, ctxs, new)  # nothing is evicted for a page no slot holds
            failed = self.set_path.with_dram_room(keys, ctxs, new, attempt, deadline) if new else []
            self.state.counts["reservations_no_room"] += len(failed)
        for i, res in got.items():
            out[i] = res
        return out

    def _held_same_size(
        self, dram: DramTier, keys: Sequence[str], ctxs: Sequence[AccessContext]
    ) -> list[bool]:
        """Per key: does DRAM hold it at the size of this set? An entry of another size under the
        same key (a page of another geometry) is removed from every tier and reserved anew, so a
        set never reports a page stored that a read of its size would miss."""
        sizes = dram.stored_sizes(keys).tolist()
        other = [k for k, s, c in zip(keys, sizes, ctxs, strict=True) if s >= 0 and s != c.size]
        if other:
            log.warning(
                "%d set(s) replace an entry of another size under the same key (e.g. %s)",
                len(other),
                other[0],
            )
            self.state.counts["replaced_other_size"] += len(other)
            for key in other:
                self.state.remove(key)
        return [s == c.size for s, c in zip(sizes, ctxs, strict=True)]

    @staticmethod
    def _fitting(dram: DramTier, ctxs: Sequence[AccessContext], idx: list[int]) -> list[int]:
        """``idx`` less the pages no DRAM slot can hold (``DramTier.fits``; counted there as
        ``rejected_too_large``): making room for them would evict pages and still store nothing.
        One check per distinct size."""
        sizes = {ctxs[i].size for i in idx}
        unfit = {size for size in sizes if not dram.fits(size)}
        if not unfit:
            return idx
        out = [i for i in idx if ctxs[i].size not in unfit]
        dram.count_too_large(len(idx) - len(out))
        return out

    @staticmethod
    def _reserver(
        dram: DramTier,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        into: dict[int, Reservation],
        tag: int = 0,
    ) -> Callable[[list[int]], list[bool]]:
        """An ``attempt`` for ``SetPath.with_dram_room`` that reserves DRAM slots ``into`` a dict (each
        tagged with ``tag``: the store's ``tenant_fence`` when the reservation began)."""

        def attempt(missing: list[int]) -> list[bool]:
            got = dram.reserve([(keys[i], ctxs[i].size, int(ctxs[i].obj_type)) for i in missing], tag)
            for i, res in zip(missing, got, strict=True):
                if res is not None:
                    into[i] = res
            return [res is not None for res in got]

        return attempt

    def commit_batch(
        self,
        reservations: Sequence[Reservation],
        ctxs: Sequence[AccessContext],
        deadline: float | None = None,
    ) -> list[bool]:
        """Publish filled reservations (visible at once), then place them exactly as a set would
        (one placement call per key): a page the policy refuses is removed again (True: a
        decision, not a failure); write-through copies and pool tiers follow as for ``put_batch``.
        The placement runs on the worker after the caller returns (it costs the writer nothing),
        unless pools take copies. False: not stored, or reserved before a clear of its tenant
        (``clear_tenant``: given back). A data call (``CallGate``): a tenant clear waits for it."""
        if self.state.dram is None or not reservations:
            return [False] * len(reservations)
        gen = self.state.gate.enter()
        try:
            keep = self._not_cleared(reservations)
            if keep is None:  # the usual commit: no tenant clear since the reservations
                return self._commit(reservations, ctxs, deadline)
            self.abort_batch([r for r, k in zip(reservations, keep, strict=True) if not k])
            out = [False] * len(reservations)
            idx = [i for i, k in enumerate(keep) if k]
            if idx:
                done = self._commit([reservations[i] for i in idx], [ctxs[i] for i in idx], deadline)
                for i, ok in zip(idx, done, strict=True):
                    out[i] = ok
            return out
        finally:
            self.state.gate.exit(gen)

    def _not_cleared(self, reservations: Sequence[Reservation]) -> list[bool] | None:
        """Per reservation, whether no clear of its key's tenant ran since it was made (counted
        ``commits_refused_tenant_clear`` otherwise); None when no tenant clear ran since any of
        them (one C-level pass over the tags)."""
        fence = self.state.tenant_fence
        if not fence & 1 and set(map(_TAG, reservations)) == {fence}:
            return None
        since: dict[int, set[str] | None] = {}
        tenant_of = self.state.tenant_of
        keep: list[bool] = []
        for res in reservations:
            if res.tag not in since:
                since[res.tag] = self.state.tenants_cleared_since(res.tag)
            gone = since[res.tag]
            keep.append(gone is not None and tenant_of(res.key) not in gone)
        self.state.counts["commits_refused_tenant_clear"] += keep.count(False)
        return keep

    def _commit(
        self, reservations: Sequence[Reservation], ctxs: Sequence[AccessContext], deadline: float | None
    ) -> list[bool]:
        assert self.state.dram is not None
        deadline = self.state.deadline(deadline)
        epoch = self.state.clear_epoch  # before the publish: a clear after it keeps pool copies out
        published = self.state.dram.publish_flags(reservations)
        live = [(res.key, ctx) for res, ctx in compress(zip(reservations, ctxs, strict=True), published)]
        if live:
            if any(p.write_through for p in self.state.pools):
                self._place_committed(live, deadline, epoch)
            else:
                with contextlib.suppress(RuntimeError):  # closing: nothing to place any more
                    self.state.worker.submit(self._place_committed_later, live, deadline, epoch)
        return published

    def _place_committed_later(
        self, live: Sequence[tuple[str, AccessContext]], deadline: float, epoch: int
    ) -> None:
        try:
            self._place_committed(live, deadline, epoch)
        except Exception:
            self.state.counts["bookkeeping_errors"] += 1
            log.exception("placement of served sets failed")

    def _place_committed(
        self, live: Sequence[tuple[str, AccessContext]], deadline: float, epoch: int
    ) -> None:
        assert self.state.dram is not None
        keys = [k for k, _ in live]
        live_ctxs = [c for _, c in live]
        outcomes, drops, demote = self.state.decide_sets(keys, live_ctxs, live_ctxs[0].size)
        dropped = {key for key, _tier in drops}
        unwanted = [k for k, o in zip(keys, outcomes, strict=True) if o == SetOutcome.REFUSED or k in dropped]
        self.state.dram.remove_batch(unwanted)
        self.state.apply(drops, demote)
        if self.state.mover is not None and self.state.options.ssd_write_through:
            self.state.mover.copy_later(
                [k for k, o in zip(keys, outcomes, strict=True) if o == SetOutcome.NEW_DRAM]
            )
        gone = set(unwanted)
        self._copy_to_pools([(k, c) for k, c in live if k not in gone], deadline, epoch)

    def abort_batch(self, reservations: Sequence[Reservation]) -> None:
        if self.state.dram is not None:
            self.state.dram.cancel(reservations)

    def _copy_to_pools(self, items: Sequence[tuple[str, AccessContext]], deadline: float, epoch: int) -> None:
        """Write-through pools get the DRAM copies of ``items`` they lack. ``epoch``: the store's
        ``clear_epoch`` read before the pages were published; once a clear has started since, no
        pool gets a copy of them (counted ``pool_writes_skipped_clear``), the same fence as a set's
        pool writes (``TieredStore.put_batch``)."""
        pools = [p for p in self.state.pools if p.write_through]
        if not pools or not items or self.state.dram is None:
            return
        pinned = [p for p in self.state.dram.pin_entries([k for k, _ in items]) if p is not None]
        try:
            ctx_of = dict(items)
            for pool in pools:
                found = pool.contains_batch([p.key for p in pinned])
                todo = [p for p, f in zip(pinned, found, strict=True) if not f]
                if todo and self.state.clear_epoch != epoch:  # a clear overtook the commit
                    self.state.counts["pool_writes_skipped_clear"] += len(todo)
                    return
                if todo:
                    pool.put_batch([(p.key, [p.data.data], ctx_of[p.key]) for p in todo], deadline=deadline)
        finally:
            self.state.dram.release(pinned)

    def locate_batch(
        self,
        keys: Sequence[str],
        sizes: Sequence[int],
        deadline: float | None = None,
        obj_type: ObjectType = ObjectType.KV_PAGE,
    ) -> list[Located | None]:
        """Where each page lives in DRAM, for a client that copies it out itself (``sizes``: the
        expected sizes, 0 = any). Pages another tier holds (SSD, pool) are first read into
        reserved DRAM slots within the deadline. Results after the first page no tier could
        serve are None (SGLang uses only the leading run). One placement call per page read. A
        data call (``CallGate``): a tenant clear waits for it (it may publish staged pages)."""
        if self.state.dram is None or not keys:
            return [None] * len(keys)
        gen = self.state.gate.enter()
        try:
            return self._locate(keys, sizes, deadline, obj_type)
        finally:
            self.state.gate.exit(gen)

    def _locate(
        self, keys: Sequence[str], sizes: Sequence[int], deadline: float | None, obj_type: ObjectType
    ) -> list[Located | None]:
        assert self.state.dram is not None
        dram = self.state.dram
        deadline = self.state.deadline(deadline)
        located: list[Located | None] = dram.locate(keys, sizes)
        level_of: list[Tier | None] = [dram if loc is not None else None for loc in located]
        pending = [i for i, loc in enumerate(located) if loc is None]
        for tier in self.state.tiers:
            if not pending:
                break
            if tier is dram:
                continue
            found = tier.contains_batch([keys[i] for i in pending])
            for i, ok in zip(pending, found, strict=True):
                if ok:
                    level_of[i] = tier
            pending = [i for i, ok in zip(pending, found, strict=True) if not ok]
        stop = pending[0] if pending else len(keys)
        want = [i for i in range(stop) if located[i] is None]
        with self.state.lock:
            request_len = self.state.request_len.get(keys[0], 0)
        real = [loc.nbytes if loc is not None else sizes[i] for i, loc in enumerate(located)]
        if not want and stop == len(keys):
            # all in DRAM (the common hit): answer now, note the hits while the client copies
            ctxs = get_contexts(keys, real, request_len, obj_type=obj_type)
            with contextlib.suppress(RuntimeError):  # closing: nothing to note any more
                self.state.worker.submit(self._note_dram_hits_later, keys, ctxs, real[0])
            return located
        if want:
            real = self._staged_sizes(keys, sizes, want, level_of, real)
        ctxs = get_contexts(keys, real, request_len, obj_type=obj_type)
        if want:
            for i, loc in self._stage(keys, ctxs, want, level_of, deadline).items():
                located[i] = loc
        first_miss = next((i for i, loc in enumerate(located) if loc is None), len(keys))
        located[first_miss:] = [None] * (len(keys) - first_miss)
        refused = self._note_located(keys, ctxs, located, level_of)
        if refused:
            dram.remove_batch(refused)
            gone = set(refused)
            located = [
                None if loc is not None and k in gone else loc for k, loc in zip(keys, located, strict=True)
            ]
        return located

    def _staged_sizes(
        self,
        keys: Sequence[str],
        sizes: Sequence[int],
        want: list[int],
        level_of: Sequence[Tier | None],
        real: list[int],
    ) -> list[int]:
        """Object sizes of the pages to stage: the SSD knows its entries; else the caller's."""
        out = list(real)
        for i in want:
            if level_of[i] is self.state.ssd and self.state.ssd is not None:
                size = self.state.ssd.engine.object_size(keys[i])
                if size is not None and (not sizes[i] or size == sizes[i]):
                    out[i] = size
                else:
                    out[i] = 0
        return out

    def _stage(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        want: list[int],
        level_of: Sequence[Tier | None],
        deadline: float,
    ) -> dict[int, Located]:
        """Read pages ``want`` from their tier into reserved DRAM slots and publish them."""
        assert self.state.dram is not None
        dram = self.state.dram
        reserved: dict[int, Reservation] = {}
        sized = self._fitting(dram, ctxs, [i for i in want if ctxs[i].size > 0])
        attempt = self._reserver(dram, keys, ctxs, reserved)
        if sized:
            self.state.counts["staging_no_room"] += len(
                self.set_path.with_dram_room(keys, ctxs, sized, attempt, deadline)
            )
        read: list[Reservation] = []
        order: list[int] = []
        for tier in {id(level_of[i]): level_of[i] for i in reserved}.values():
            assert tier is not None
            idx = [i for i in reserved if level_of[i] is tier]
            ok = tier.get_batch_into([(keys[i], [reserved[i].body.data], ctxs[i]) for i in idx], deadline)
            for i, good in zip(idx, ok, strict=True):
                if good:
                    read.append(reserved[i])
                    order.append(i)
        done = set(order)
        dram.cancel([res for i, res in reserved.items() if i not in done])
        out: dict[int, Located] = {}
        for i, loc in zip(order, dram.publish(read), strict=True):
            if loc is not None:
                out[i] = loc
        self.state.counts["promotions"] += len(out)
        return out

    def _note_located(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        located: Sequence[Located | None],
        level_of: Sequence[Tier | None],
    ) -> list[str]:
        """Placement bookkeeping of a located read: every page served is in DRAM now (placed
        there, promoted when it came from below). Returns the pages the policy refused to adopt
        (the caller removes their DRAM copies)."""
        refused: list[str] = []
        size = next((c.size for c in ctxs if c.size), 0)
        with self.state.lock:
            placement = self.state.placement_for(size)
            self.state.forget_reclaimed(placement)
            for i, key in enumerate(keys):
                if located[i] is None:
                    if level_of[i] is None and key in placement:
                        placement.remove(key)  # bookkeeping said resident, no tier has it
                    continue
                if placement.hit(key, ctxs[i], promote=True) is None and not placement.adopt(
                    key, ctxs[i]._replace(promoted=True), DRAM
                ):
                    refused.append(key)
            drops, demote = placement.settle()
        self.state.apply(drops, demote)
        return refused

    def _note_dram_hits_later(self, keys: Sequence[str], ctxs: Sequence[AccessContext], nbytes: int) -> None:
        """``StoreState.note_dram_hits`` and its consequences, on the worker (after a served lookup)."""
        try:
            self.state.apply(*self.state.note_dram_hits(keys, ctxs, nbytes))
        except Exception:
            self.state.counts["bookkeeping_errors"] += 1
            log.exception("placement bookkeeping of a served read failed")
