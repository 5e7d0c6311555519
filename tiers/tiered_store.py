"""``TieredStore``: the one store. Local DRAM and SSD placed by ONE policy; the shared pool beside.

Tiers: an optional ``DramTier``, an optional ``SsdTier`` and any number of pool tiers (the remote
DRAM pool). ``policy.placement.TierPlacement`` owns the local capacity: its policy decides which
pages leave the host, DRAM holds the most recently used of them, and every get or set asks it
once per key (``set`` / ``hit``). This class moves bytes as told:

- set: new pages are copied into free DRAM from the caller's buffers (with no DRAM tier: written
  to SSD within the call's deadline); pages the policy refuses are a decision, not a failure (True,
  counted ``not_admitted``); pages that find no DRAM room in time are False (SGLang keeps them),
  and so are pages larger than a local tier can hold (counted as that tier's ``too_large``
  refusal; the policy is not asked, so nothing is demoted or dropped to make room for them);
  ``ssd_write_through`` also queues every new page for an SSD copy; pool tiers with
  ``write_through`` receive every page they lack.
- get: DRAM, then SSD, then the pool; results after the first miss are False (SGLang uses only the
  leading run). An SSD hit is promoted into free DRAM when the SSD tier says it is hot
  (``promote_min_hits``); a pool hit is copied into DRAM when the pool tier says so; a page the
  placement does not know (recovered from SSD, found in the pool) is adopted.
- exists: the leading run of keys held by any tier; the first miss is told to the policy.
- after each call: pages the policy dropped are removed from both local tiers; DRAM overflow is
  handed to the ``Mover`` (copy to SSD, then free DRAM), so sets do not wait for the disk. Only
  when DRAM has no free slot does a set run queued moves itself (``wait_for_room``), and never past
  its deadline.

Served arenas (the host cache, memory nodes): ``served_arena.ServedArena`` (``store.served``) is
this store's face for clients that copy bytes themselves: DRAM slots reserved and committed through
the same placement (one policy call per key), lookups that bring SSD or pool hits into DRAM first.

Shared state: the placement, the lock, the published tiers, the fences and the counters are one
``StoreState`` (``store_state.py``) that this class, the served arena, the runtime operations and
warm restart all hold; none of them reaches into another's fields. The set path is ``set_path.py``.

Deadlines: every call runs under ``timeout_s`` (``io.timeout_s``) unless given an absolute
``deadline`` (``time.monotonic()``); tiers get the deadline and report unfinished work as misses
/ False. Failure semantics of each tier: ``tier.py``.

Locks: one lock guards the placement (bookkeeping only). No I/O and no SSD call runs under it;
under it only the DRAM tier's index may be touched (lock order: store -> DRAM). Keys the SSD
engine drops (region reclaim) are queued and forgotten at the next call, so the engine never
waits for this lock.

Runtime changes (``runtime_ops.py``: attach, detach, resize, freeze, clear one tenant) never stop
the data path. The tiers are an immutable ``TierLayout`` published by one attribute store (the
``tiers``/``dram``/``ssd``/``pools``/``mover`` properties read it); every data call is counted by
a ``CallGate``, so a change publishes the new layout, waits (bounded) until the calls that might
still use the old one are over, then fixes the placement and closes what left. Changes run one at
a time (``StoreState.changes``, taken before the store lock, never by a data call). The placement
is resized before a tier's role changes, so a call never gets a decision for a tier it cannot see.
A closed tier answers miss / False, so a call that outlives the bounded wait misses, it never
reads wrong bytes.

Clear is a barrier (``clear``): every operation that may publish later (a get's promotion, a
set, a demotion, a re-warm, a served reservation) reads the clear fence before it takes bytes:
DRAM's ``generation`` and the SSD ``epoch``. A clear closes the fence under the store lock, clears
every tier, then opens it; a publish checks the fence under the lock that publishes (DRAM's, the
SSD engine's), so no page written before a clear is served after it, in any tier.

Tenants: ``tenant_of(key)`` names a key's tenant; the placement's ``TenantLedger`` counts each
tenant's bytes per tier and enforces the shares; ``tenant_counts`` counts each tenant's calls
(a call is one tenant's: that of its first key).

Placement bookkeeping runs in the calling thread. Handing it to a worker thread to overlap the
copies gained nothing (copies keep the GIL: ``parts``) and cost two GIL hand-offs per call, each
up to a switch interval (5 ms) while another thread runs Python, as SGLang's scheduler does. The
worker (``hicache-placement``) only runs work nobody waits for: deferred placement of pages
served to other processes (``served_arena``) and ``settle`` barriers.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import compress
from operator import not_
from typing import Any

from .dram_tier import DramTier
from .events_sink import EventsSink
from .mover import Mover
from .parts import Parts, pages_sizes
from .policy import AccessContext, EvictionPolicy, ObjectType
from .policy.contexts import get_contexts, miss_context
from .policy.hints import Hints
from .policy.placement import DRAM, SSD, TierPlacement
from .policy.quotas import TenantShare, default_tenant
from .progress import Progress
from .rewarm import WarmKeeper
from .runtime_ops import RuntimeOps
from .served_arena import ServedArena
from .set_path import SetPath
from .ssd_tier import SsdTier
from .store_options import StoreOptions, WarmOptions
from .store_state import REQUEST_MEMORY, StoreState, gated
from .tier import Tier

__all__ = ["StoreOptions", "TieredStore", "WarmOptions"]

log = logging.getLogger(__name__)


class TieredStore:
    def __init__(
        self,
        tiers: Sequence[Tier],
        policy_factory: Callable[[], EvictionPolicy],
        options: StoreOptions | None = None,
        capacity: tuple[int, int] | None = None,
        hints: Hints | None = None,
        tenant_of: Callable[[str], str] = default_tenant,
        tenant_shares: Mapping[str, TenantShare] | None = None,
    ) -> None:
        """``capacity``: fixed ``(total, dram)`` placement capacities in size units; by default
        they are derived from the tiers and the first object's size (and again after every
        runtime change of the tiers). ``hints``: what the policy is told about the future
        (``self.hints``; a fresh ``Hints`` by default). ``tenant_of``: a key's tenant;
        ``tenant_shares``: the tenants' capacity shares (``policy.quotas``)."""
        if not tiers:
            raise ValueError("TieredStore needs at least one tier")
        # hint channel (issue 14): thread-safe and bounded; the admin endpoint writes it
        self.state = state = StoreState(
            tiers,
            policy_factory,
            options or StoreOptions(),
            capacity,
            hints if hints is not None else Hints(),
            tenant_of,
            tenant_shares,
        )
        lay = state.layout
        if lay.dram is not None and lay.ssd is not None:
            mover = Mover(lay.dram, lay.ssd, state, timeout_s=state.options.timeout_s)
            state.layout = replace(lay, mover=mover)
        if lay.ssd is not None:
            state.hook_ssd(lay.ssd)
        if capacity is not None:
            state.placement_for(0)
        self.set_path = SetPath(state)
        self.served = ServedArena(state, self.set_path)
        warm = state.options.warm
        self.warm = WarmKeeper(state, warm) if warm is not None and warm.enabled else None
        self._ops = RuntimeOps(state, self.warm)
        if self.warm is not None and lay.ssd is not None:
            self.warm.restore(lay.ssd, background=True)

    # ------------------------------------------------------------------ the shared state (StoreState)
    @property
    def options(self) -> StoreOptions:
        return self.state.options

    @property
    def counts(self) -> Counter[str]:
        return self.state.counts

    @property
    def hints(self) -> Hints:
        return self.state.hints

    @property
    def frozen(self) -> bool:
        """Refusing new pages (``freeze``)."""
        return self.state.frozen

    @property
    def closed(self) -> bool:
        """Closing or closed: runtime changes stop (and refuse to start)."""
        return self.state.closed

    @property
    def clearing(self) -> set[str]:
        """Tenants being cleared: their sets are refused meanwhile."""
        return self.state.clearing

    @property
    def tenant_of(self) -> Callable[[str], str]:
        return self.state.tenant_of

    @property
    def tenant_counts(self) -> dict[str, Counter[str]]:
        return self.state.tenant_counts

    @property
    def events(self) -> EventsSink:
        """Where the tiers' KV events go (``set_events``)."""
        return self.state.events

    @property
    def tiers(self) -> tuple[Tier, ...]:
        return self.state.tiers

    @property
    def dram(self) -> DramTier | None:
        return self.state.dram

    @property
    def ssd(self) -> SsdTier | None:
        return self.state.ssd

    @property
    def pools(self) -> tuple[Tier, ...]:
        return self.state.pools

    @property
    def mover(self) -> Mover | None:
        return self.state.mover

    @property
    def local(self) -> bool:
        return self.state.local

    @property
    def placement(self) -> TierPlacement | None:
        """The placement (None until the first call that knows an object size)."""
        return self.state.placement

    def capacities(self, lay: Any, nbytes: int) -> tuple[int, int, int]:
        """``StoreState.capacities``."""
        return self.state.capacities(lay, nbytes)

    # ------------------------------------------------------------------ existence
    @gated
    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many leading ``keys`` some tier holds."""
        return self._exists(keys)[1]

    @gated
    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        """Per key: does some tier hold it? The first missing key is told to the policy."""
        return self._exists(keys)[0]

    def _exists(self, keys: Sequence[str]) -> tuple[list[bool], int]:
        """``exists_batch``'s flags and the length of their leading run of hits."""
        if not keys:
            return [], 0
        n = len(keys)
        present = self._contains(keys)
        hit = present.index(False) if False in present else n
        with self.state.lock:
            request_len = self.state.request_len
            request_len[keys[0]] = n
            request_len.move_to_end(keys[0])
            if len(request_len) > REQUEST_MEMORY:
                request_len.popitem(last=False)
            self.state.tenant_count_locked(keys[0], exists_pages=n, exists_hit_pages=hit)
            if hit < n and self.local and self.state.placement is not None:
                self.state.placement.miss(keys[hit], miss_context(hit, n))
        return present, hit

    @gated
    def contains_batch(self, keys: Sequence[str]) -> list[bool]:
        """Per key, whether some tier holds it (no prefix cut: a hybrid model's sidecar objects
        have holes that matter). Tells the policy nothing."""
        return self._contains(keys)

    def _contains(self, keys: Sequence[str]) -> list[bool]:
        """``contains_batch`` inside a gated call: each tier is asked once, for the keys the
        tiers before it lack (the index work runs in C-level passes, not per key in Python)."""
        tiers = self._existence_order()
        if not tiers or not keys:
            return [False] * len(keys)
        present = list(tiers[0].contains_batch(keys))
        for tier in tiers[1:]:
            if all(present):
                break
            pending = list(compress(range(len(keys)), map(not_, present)))
            found = tier.contains_batch(list(map(keys.__getitem__, pending)))
            for i in compress(pending, found):
                present[i] = True
        return present

    @gated
    def where_batch(self, keys: Sequence[str], pools: bool = False) -> list[str | None]:
        """Per key, the name of the fastest tier holding it (read order: DRAM, SSD, then the pools
        when ``pools``), else None. Read-only: one index lookup batch per tier (each tier asked only
        for the keys the ones before lack), no store lock, no policy call, no count: a lookup is
        not a hit. Without ``pools`` no I/O runs; a pool is asked once for the batch (its deadline)."""
        lay = self.state.layout
        local = [t for t in (lay.dram, lay.ssd) if t is not None]
        where: list[str | None] = [None] * len(keys)
        pending = list(range(len(keys)))
        for tier in (*local, *lay.pools) if pools else local:
            if not pending:
                break
            found = tier.contains_batch([keys[i] for i in pending])
            for i in compress(pending, found):
                where[i] = tier.name
            pending = [i for i, hit in zip(pending, found, strict=True) if not hit]
        return where

    def _existence_order(self) -> tuple[Tier, ...]:
        """The order ``_contains`` asks the tiers in: the local ones (in-memory index lookups)
        first, the one holding more entries before the other, then the pools in read order.

        The answer does not depend on the order; its cost does. Each tier is asked only for the
        keys the ones before it lack, and at a million entries every lookup of a fresh key costs
        a few cache misses (~0.4 us here) whether it hits or not. With the SSD holding most pages
        (every one, in write-through), asking DRAM first made most keys cost two lookups."""
        lay = self.state.layout
        dram, ssd = lay.dram, lay.ssd
        if dram is None or ssd is None:
            return lay.tiers
        local = (ssd, dram) if ssd.entry_count() > dram.entry_count() else (dram, ssd)
        return (*local, *lay.pools)

    # ------------------------------------------------------------------ reads
    @gated
    def get_batch_into(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        obj_type: ObjectType = ObjectType.KV_PAGE,
        deadline: float | None = None,
    ) -> list[bool]:
        if not keys:
            return []
        deadline = self.state.deadline(deadline)
        sizes = pages_sizes(parts)
        dram = self.dram
        # the fence, read before any byte is: a promotion of bytes read before a clear never lands
        generation = dram.generation if dram is not None else None
        with self.state.lock:
            request_len = self.state.request_len.get(keys[0], 0)
            epoch = self.state.clear_epoch
        ctxs = get_contexts(keys, sizes, request_len, obj_type=obj_type)
        done, level_of = self._read_through(keys, parts, ctxs, deadline)
        self.state.tenant_count(keys[0], get_pages=len(keys), get_hit_pages=sum(done))
        promote = self._note_reads(keys, ctxs, done, level_of, sizes[0], epoch)
        if promote and dram is not None:
            landed = dram.put_batch([(keys[i], parts[i], ctxs[i]) for i in promote], deadline, generation)
            failed = [keys[i] for i, ok in zip(promote, landed, strict=True) if not ok]
            self.counts["promotions"] += len(promote) - len(failed)
            if failed:
                if dram.generation != generation:
                    self.counts["promotions_skipped_clear"] += len(failed)
                else:
                    self.counts["promotions_skipped_full"] += len(failed)
                self._reconcile(failed)
        with self.state.lock:
            drops, demote = self.state.placement.settle() if self.state.placement is not None else ([], [])
        self.state.apply(drops, demote)
        return done

    def _reconcile(self, keys: Sequence[str]) -> None:
        """``keys`` are not in DRAM although the placement may place them there: they stay placed
        on SSD when it holds them, and are forgotten otherwise."""
        ssd_tier, dram_tier = self.ssd, self.dram
        on_ssd = ssd_tier.contains_batch(keys) if ssd_tier is not None else [False] * len(keys)
        in_dram = dram_tier.contains_batch(keys) if dram_tier is not None else [False] * len(keys)
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
        self, keys: Sequence[str], parts: Sequence[Parts], ctxs: Sequence[AccessContext], deadline: float
    ) -> tuple[list[bool], list[Tier | None]]:
        """Each key from the first tier that has it, tier by tier, stopping at the first key no
        tier has (SGLang uses only the leading run). Returns per key whether its bytes were copied
        and from which tier."""
        n = len(keys)
        done = [False] * n
        level_of: list[Tier | None] = [None] * n
        pending = list(range(n))
        for tier in self.tiers:
            if not pending:
                break
            if len(pending) == n:
                got = tier.get_batch_into(list(zip(keys, parts, ctxs, strict=True)), deadline=deadline)
                if all(got):  # the first tier served them all (the usual hit)
                    return [True] * n, [tier] * n
            else:
                got = tier.get_batch_into([(keys[i], parts[i], ctxs[i]) for i in pending], deadline=deadline)
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
        """Placement bookkeeping of a read (one placement call per key read); returns the
        indexes of the pages to copy into DRAM from the caller's buffers. ``epoch``: the clear
        fence read when the read started; if a clear ran (or runs) since, the read is not told
        to the placement (nothing adopted, nothing promoted)."""
        if not self.local:
            return []
        # frozen, or the tenant being cleared: nothing is written, promotions included
        frozen = self.frozen or bool(self.clearing and self.tenant_of(keys[0]) in self.clearing)
        dram, ssd = self.dram, self.ssd  # one layout for the whole call
        if dram is not None and level_of.count(dram) == len(keys) and all(done):
            # every page read from DRAM (the usual hit): nothing to promote, one placement call
            with self.state.lock:
                if epoch is not None and epoch != self.state.clear_epoch:
                    return []
                placement = self.state.placement_for(nbytes)
                self.state.forget_reclaimed(placement)
                if placement.hit_in_dram_batch(keys, ctxs):
                    return []
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
                self.counts["reads_across_clear"] += 1
                return []
            placement = self.state.placement_for(nbytes)
            self.state.forget_reclaimed(placement)
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

    # ------------------------------------------------------------------ writes
    @gated
    def put_batch(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        prev_key: str | None = None,
        prefix_len: int | None = None,
        obj_type: ObjectType = ObjectType.KV_PAGE,
        deadline: float | None = None,
        supersedes: Sequence[str] = (),
    ) -> list[bool]:
        """Store ``keys`` (module docstring). ``prefix_len``: pages of the request stored before
        this call (SGLang's ``prefix_keys``), ``prev_key`` the last of them. ``supersedes``: for
        trailing sidecar objects, those of the same pool for earlier pages of the chain; the
        resident ones are evicted first while the last of ``keys`` is resident (local tiers)."""
        return self.set_path.put(keys, parts, prev_key, prefix_len, obj_type, deadline, supersedes)

    # ------------------------------------------------------------------ the rest of the contract
    @gated
    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """Caller memory that pages will be copied from and into (SGLang's host pool buffers),
        announced once before the first call: tiers whose transport must register memory (RDMA
        memory regions, Mooncake's ``register_buffer``) do it here; the others ignore it. A
        tier that cannot register keeps working through its slower path (never raises). A tier
        attached later gets the same regions."""
        self.state.regions.extend(regions)
        for tier in self.tiers:
            tier.register_memory(regions)

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    def remove(self, key: str) -> bool:
        """Drop ``key`` from the placement and every tier; True if some tier held it."""
        return self.state.remove(key)

    @property
    def tenant_fence(self) -> int:
        """The tenant-clear fence (``StoreState.tenant_fence``): odd while a tenant clear runs."""
        return self.state.tenant_fence

    def tenants_cleared_since(self, fence: int) -> set[str] | None:
        """``StoreState.tenants_cleared_since``."""
        return self.state.tenants_cleared_since(fence)

    @property
    def clear_epoch(self) -> int:
        """How many clears started and finished: even while none runs, odd during one."""
        return self.state.clear_epoch

    @gated
    def clear(self) -> None:
        """Drop every page of every tier: a barrier. Under the store lock the fence closes
        (``clear_epoch`` odd, DRAM's ``begin_clear``); then every tier is cleared; then the fence
        opens. A get, promotion, demotion, re-warm or set that read the fence before it closed
        (or while it was closed) never publishes a page into any local tier after it: DRAM
        refuses its publish (``DramTier.generation``), the SSD engine does not index its write
        (``SsdEngine.put_batch``'s ``epoch``), and sets arriving meanwhile are refused (False,
        counted ``refused_clearing``). A page written before the clear is never served after it.
        Where the SSD's new epoch cannot be made durable, the SSD tier refuses every call from
        then on (``ssd.epoch``)."""
        if self.warm is not None:
            self.warm.stop_rewarm()
        with self.state.clear_mutex:
            dram = self.dram
            with self.state.lock:
                self.state.clear_epoch += 1
                if dram is not None:
                    dram.begin_clear()
                if self.state.placement is not None:
                    self.state.placement.clear()
                self.state.reclaimed.clear()
            try:
                for tier in self.tiers:
                    tier.clear()
            finally:
                with self.state.lock:
                    self.state.clear_epoch += 1
                    if dram is not None:
                        dram.end_clear()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until deferred bookkeeping and background moves are done (tests, replay)."""
        self.state.worker.submit(lambda: None).result(timeout_s)
        mover = self.mover
        return mover.flush(timeout_s) if mover is not None else True

    def close(self, flush_timeout_s: float = 0.0) -> None:
        """Stop background movement (it reads DRAM and writes SSD); with a flush timeout, copy the
        DRAM pages the SSD lacks to the SSD (bounded by it); write the warm-restart snapshot; then
        close every tier."""
        self.state.closed = True
        if self.warm is not None:
            self.warm.stop_rewarm()
        # a runtime change in progress sees ``closed`` at its next step and ends (bounded)
        got = self.state.changes.acquire(timeout=max(self.options.timeout_s, 5.0))
        if got:
            self.state.changes.release()
        self.state.worker.shutdown(wait=True)
        if self.mover is not None:
            self.mover.close()
            if flush_timeout_s > 0:
                self.mover.drain_dram(flush_timeout_s)
        if self.warm is not None:
            self.warm.save()
            self.warm.close()
        for tier in self.tiers:
            tier.close()

    # ------------------------------------------------------------------ runtime changes (runtime_ops.py)
    def set_events(self, sink: EventsSink) -> None:
        """From now on every tier (and every tier attached later) tells ``sink`` what it stores,
        drops and clears (``events_sink``: KV events for routers)."""
        self.state.events = sink
        for tier in self.tiers:
            tier.events = sink

    def attach_tier(self, tier: Tier, timeout_s: float = 60.0, progress: Progress | None = None) -> None:
        """Add a tier the store did not start with (an SSD directory, a remote pool, DRAM)."""
        tier.events = self.events
        self._ops.attach(tier, progress or Progress(), time.monotonic() + timeout_s)

    def detach_tier(
        self, name: str, mode: str = "drain", timeout_s: float = 60.0, progress: Progress | None = None
    ) -> None:
        """Remove tier ``name``: ``drain`` moves its pages down (or out) first, ``drop`` does not."""
        self._ops.detach(name, mode, progress or Progress(), time.monotonic() + timeout_s)

    def resize_tier(
        self, name: str, capacity: int, timeout_s: float = 60.0, progress: Progress | None = None
    ) -> None:
        """Give the DRAM or SSD tier ``capacity`` bytes (up to its ``max_capacity``)."""
        self._ops.resize(name, capacity, progress or Progress(), time.monotonic() + timeout_s)

    def freeze(self, frozen: bool = True) -> None:
        """Refuse new pages (True) or accept them again (False); reads are always served."""
        self._ops.freeze(frozen)

    def clear_tenant(self, tenant: str, timeout_s: float = 60.0, progress: Progress | None = None) -> None:
        """Remove every page of ``tenant``; the other tenants' pages stay."""
        self._ops.clear_tenant(tenant, progress or Progress(), time.monotonic() + timeout_s)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {tier.name: tier.stats() for tier in self.tiers}
        if self.mover is not None:
            out["ssd"] = {**out.get("ssd", {}), "background": self.mover.stats()}
        if self.warm is not None:
            out["warm"] = self.warm.stats()
        out["store"] = {
            "tiers": self.state.layout.names(),
            "frozen": self.frozen,
            "calls_in_flight": self.state.gate.in_flight,
        }
        with self.state.lock:
            placement = self.state.placement
            ledger = self.state.ledger.stats()
            out["tenants"] = {
                t: {**ledger.get(t, {}), **dict(self.tenant_counts.get(t, {}))}
                for t in sorted(set(ledger) | set(self.tenant_counts))
            }
            out["placement"] = {
                "policy": type(placement.policy).__name__ if placement else None,
                "capacity": placement.capacity if placement else None,
                "dram_capacity": placement.dram_capacity if placement else None,
                "resident": len(placement) if placement else 0,
                "in_dram": placement.dram_len if placement else 0,
                "used": placement.used if placement else 0,
                "dram_used": placement.dram_used if placement else 0,
                **dict(self.counts),
            }
        return out
