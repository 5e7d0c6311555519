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
a time (``_changes`` lock, taken before the store lock, never by a data call). The placement is
resized before a tier's role changes, so a call never gets a decision for a tier it cannot see.
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

import contextlib
import functools
import logging
import operator
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import not_
from typing import Any, TypeVar, cast

from .dram_tier import DramTier
from .events_sink import NULL_SINK, EventsSink
from .layout import CallGate, TierLayout
from .mover import Mover
from .parts import Parts, pages_sizes
from .policy import AccessContext, EvictionPolicy, ObjectType
from .policy.contexts import get_contexts, miss_context, set_contexts
from .policy.hints import Hints
from .policy.placement import DRAM, SSD, SetOutcome, TierPlacement
from .policy.quotas import TenantLedger, TenantShare, default_tenant
from .progress import Progress
from .rewarm import WarmKeeper, WarmOptions
from .runtime_ops import TENANT_CLEAR_LOG, RuntimeOps
from .served_arena import ServedArena
from .ssd_tier import SsdTier
from .tier import Tier

log = logging.getLogger(__name__)
_DROP_KEY = operator.itemgetter(0)
_DROP_TIER = operator.itemgetter(1)
_REQUEST_MEMORY = 1 << 16
# new pages per set from which they are copied into free DRAM before the placement decides
_COPY_FIRST_MIN = 8
_TO_DRAM = (SetOutcome.NEW_DRAM, SetOutcome.UP)
_KEPT: tuple[bool | None, ...] = tuple(
    None if SetOutcome(value) == SetOutcome.REFUSED else True for value in range(len(SetOutcome))
)
"""``_put_local``'s answer for a page, indexed by its ``SetOutcome`` (whose values are 0..n-1)."""
_F = TypeVar("_F", bound=Callable[..., Any])


def _gated(method: _F) -> _F:
    """A data call: counted by the store's ``CallGate`` while it runs (runtime changes wait for it)."""

    @functools.wraps(method)
    def call(self: TieredStore, *args: Any, **kwargs: Any) -> Any:
        gen = self._gate.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._gate.exit(gen)

    return cast(_F, call)


@dataclass(frozen=True)
class StoreOptions:
    """How the store uses its tiers; each field is one YAML key (``store_builder`` maps them)."""

    timeout_s: float = 5.0
    """``io.timeout_s``: the deadline of a call that is given none."""
    dram_high: float = 0.9
    """``tiers.ssd.high_watermark``: share of DRAM the placement fills before demoting."""
    dram_low: float = 0.75
    """``tiers.ssd.low_watermark``: demotions bring DRAM back to this share."""
    ssd_fill: float = 0.85
    """Share of the SSD entries the placement uses (headroom for whole-region reclaim)."""
    ssd_write_through: bool = False
    """``tiers.ssd.mode: write_through``: every new page also gets an SSD copy (background)."""
    wait_for_room: bool = True
    """``tiers.ssd.foreground_demotion``: a set that finds no free DRAM runs queued demotions
    itself (up to its deadline) instead of refusing the pages at once."""
    type_aware_eviction: bool = True
    """``tiers.type_aware_eviction``: superseded trailing sidecar objects (Mamba states, SWA windows)
    are evicted and demoted first (``policy.superseded``)."""
    warm: WarmOptions | None = None
    """``tiers.warm``: snapshot what is hot, start warm after a restart (``rewarm.py``); None: off."""


class TieredStore:
    events: EventsSink = NULL_SINK
    """Where the tiers' KV events go (``set_events``)."""

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
        self.options = options or StoreOptions()
        self._layout = TierLayout.of(tiers)
        self._gate = CallGate()
        self._changes = threading.Lock()
        self.frozen = False
        self.closed = False  # runtime changes stop (and refuse to start) once set
        self._new_policy = policy_factory
        # hint channel (issue 14): thread-safe and bounded; the admin endpoint writes it
        self.hints = hints if hints is not None else Hints()
        self._capacity = capacity
        self._unit = 0  # the object size the placement's capacities were derived with
        self._placement: TierPlacement | None = None
        self._ledger = TenantLedger(tenant_of, tenant_shares)
        self.tenant_of = tenant_of
        self.tenant_counts: dict[str, Counter[str]] = {}
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self._too_large_logged: set[int] = set()  # page sizes already warned about
        self._reclaimed: deque[str] = deque()
        self._request_len: OrderedDict[str, int] = OrderedDict()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hicache-placement")
        self._regions: list[memoryview] = []
        self.clearing: set[str] = set()  # tenants being cleared: their sets are refused meanwhile
        # the clear fence (``clear``): even while open, odd while a clear runs; bumped under _lock
        self._clear_epoch = 0
        self._clear_mutex = threading.Lock()  # one clear at a time
        # the tenant-clear fence (``clear_tenant``): bumped under _lock when one starts and ends;
        # each finished clear is logged with the fence value at its end (``tenants_cleared_since``)
        self._tenant_fence = 0
        self._tenant_clears: list[tuple[str, int]] = []
        self._ops = RuntimeOps(self)
        lay = self._layout
        if lay.dram is not None and lay.ssd is not None:
            mover = Mover(lay.dram, lay.ssd, self, timeout_s=self.options.timeout_s)
            self._layout = replace(lay, mover=mover)
        if lay.ssd is not None:
            self._hook_ssd(lay.ssd)
        if capacity is not None:
            self._placement_for(0)
        self.served = ServedArena(self)
        warm = self.options.warm
        self.warm = WarmKeeper(self, warm) if warm is not None and warm.enabled else None
        if self.warm is not None and lay.ssd is not None:
            self.warm.restore(lay.ssd, background=True)

    # ------------------------------------------------------------------ the tiers (TierLayout)
    @property
    def tiers(self) -> tuple[Tier, ...]:
        return self._layout.tiers

    @property
    def dram(self) -> DramTier | None:
        return self._layout.dram

    @property
    def ssd(self) -> SsdTier | None:
        return self._layout.ssd

    @property
    def pools(self) -> tuple[Tier, ...]:
        return self._layout.pools

    @property
    def mover(self) -> Mover | None:
        return self._layout.mover

    def _hook_ssd(self, ssd: SsdTier) -> None:
        ssd.evict_listeners.append(self._reclaimed.append)
        ssd.engine.keep = self._ssd_copy_needed

    def _unhook_ssd(self, ssd: SsdTier) -> None:
        if self._reclaimed.append in ssd.evict_listeners:
            ssd.evict_listeners.remove(self._reclaimed.append)
        ssd.engine.keep = None

    # ------------------------------------------------------------------ placement
    @property
    def local(self) -> bool:
        return self.dram is not None or self.ssd is not None

    def _placement_for(self, nbytes: int) -> TierPlacement:
        """The placement, created at the first call that knows an object size (under the lock)."""
        if self._placement is None:
            opts = self.options
            if self._capacity is not None:
                total, dram = self._capacity
                low = int(dram * opts.dram_low / opts.dram_high) if self.ssd is not None else dram
            else:
                total, dram, low = self.capacities(self._layout, nbytes)
            self._unit = max(nbytes, 1)
            self._placement = TierPlacement(
                self._new_policy(),
                total,
                dram,
                low,
                hints=self.hints,
                ledger=self._ledger,
                type_aware=opts.type_aware_eviction,
            )
        return self._placement

    def capacities(self, lay: TierLayout, nbytes: int) -> tuple[int, int, int]:
        """``(total, dram, dram_low)`` placement capacities of the tiers of ``lay`` for objects of
        ``nbytes`` (what DRAM and SSD hold together, DRAM's high and low watermarks)."""
        opts = self.options
        size = max(nbytes, 1)
        dram_full = lay.dram.capacity_objects(size) * size if lay.dram else 0
        ssd = int(lay.ssd.capacity_objects(size) * size * opts.ssd_fill) if lay.ssd else 0
        if lay.ssd is None:
            dram = low = dram_full
        else:
            dram, low = int(dram_full * opts.dram_high), int(dram_full * opts.dram_low)
        total = max(ssd, dram) if opts.ssd_write_through else dram + ssd
        return total, dram, low

    def _forget_reclaimed(self, placement: TierPlacement) -> None:
        """Keys the SSD engine dropped: forgotten unless DRAM still holds them (under the lock)."""
        while self._reclaimed:
            key = self._reclaimed.popleft()
            if key in placement and ((dram := self.dram) is None or not dram.contains(key)):
                placement.remove(key)
                self.counts["forgotten"] += 1

    def _ssd_copy_needed(self, key: str) -> bool:
        """SSD region reclaim asks: rewrite this entry? Yes while the placement holds the page and
        this SSD copy is its only one. Called under the engine's lock: dict reads only."""
        placement = self._placement
        if placement is None or key not in placement:
            return False
        dram = self.dram
        return placement.tier_of(key) == SSD or dram is None or not dram.contains(key)

    def _deadline(self, deadline: float | None) -> float:
        return deadline if deadline is not None else time.monotonic() + self.options.timeout_s

    # ------------------------------------------------------------------ MoveListener (the mover)
    def moved(self, keys: Sequence[str]) -> None:
        """Demoted pages have an SSD copy: free their DRAM slot unless placed in DRAM again. (A
        mover that outlives its DRAM tier, being detached, has nothing to free.)"""
        with self._lock:
            placement = self._placement
            gone = [k for k in keys if placement is None or placement.tier_of(k) != DRAM]
            if (dram := self.dram) is not None:
                dram.remove_batch(gone)

    def lost(self, keys: Sequence[str]) -> None:
        """Demotions that found no SSD room: the pages leave the host (unless wanted in DRAM)."""
        with self._lock:
            placement = self._placement
            gone = [k for k in keys if placement is None or placement.tier_of(k) != DRAM]
            for key in gone:
                if placement is not None:
                    placement.remove(key)
            if (dram := self.dram) is not None:
                dram.remove_batch(gone)
            self.counts["dropped_on_demotion"] += len(gone)

    # ------------------------------------------------------------------ tenants
    def _tenant_count(self, key: str, **counts: int) -> None:
        """Count a call for the tenant of ``key`` (its first key)."""
        with self._lock:  # stats() reads the tables under it
            self._tenant_count_locked(key, **counts)

    def _tenant_count_locked(self, key: str, **counts: int) -> None:
        tenant = self._ledger.tenant_of(key)
        table = self.tenant_counts.get(tenant)
        if table is None:
            if len(self.tenant_counts) >= self._ledger.max_tenants:
                tenant = "(other)"
            table = self.tenant_counts.setdefault(tenant, Counter())
        table.update(counts)

    # ------------------------------------------------------------------ existence
    @_gated
    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many leading ``keys`` some tier holds."""
        return self._exists(keys)[1]

    @_gated
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
        with self._lock:
            request_len = self._request_len
            request_len[keys[0]] = n
            request_len.move_to_end(keys[0])
            if len(request_len) > _REQUEST_MEMORY:
                request_len.popitem(last=False)
            self._tenant_count_locked(keys[0], exists_pages=n, exists_hit_pages=hit)
            if hit < n and self.local and self._placement is not None:
                self._placement.miss(keys[hit], miss_context(hit, n))
        return present, hit

    @_gated
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

    @_gated
    def where_batch(self, keys: Sequence[str], pools: bool = False) -> list[str | None]:
        """Per key, the name of the fastest tier holding it (read order: DRAM, SSD, then the pools
        when ``pools``), else None. Read-only: one index lookup batch per tier (each tier asked only
        for the keys the ones before lack), no store lock, no policy call, no count: a lookup is
        not a hit. Without ``pools`` no I/O runs; a pool is asked once for the batch (its deadline)."""
        lay = self._layout
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
        lay = self._layout
        dram, ssd = lay.dram, lay.ssd
        if dram is None or ssd is None:
            return lay.tiers
        local = (ssd, dram) if ssd.entry_count() > dram.entry_count() else (dram, ssd)
        return (*local, *lay.pools)

    # ------------------------------------------------------------------ reads
    @_gated
    def get_batch_into(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        obj_type: ObjectType = ObjectType.KV_PAGE,
        deadline: float | None = None,
    ) -> list[bool]:
        if not keys:
            return []
        deadline = self._deadline(deadline)
        sizes = pages_sizes(parts)
        dram = self.dram
        # the fence, read before any byte is: a promotion of bytes read before a clear never lands
        generation = dram.generation if dram is not None else None
        with self._lock:
            request_len = self._request_len.get(keys[0], 0)
            epoch = self._clear_epoch
        ctxs = get_contexts(keys, sizes, request_len, obj_type=obj_type)
        done, level_of = self._read_through(keys, parts, ctxs, deadline)
        self._tenant_count(keys[0], get_pages=len(keys), get_hit_pages=sum(done))
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
        with self._lock:
            drops, demote = self._placement.settle() if self._placement is not None else ([], [])
        self._apply(drops, demote)
        return done

    def _reconcile(self, keys: Sequence[str]) -> None:
        """``keys`` are not in DRAM although the placement may place them there: they stay placed
        on SSD when it holds them, and are forgotten otherwise."""
        ssd_tier, dram_tier = self.ssd, self.dram
        on_ssd = ssd_tier.contains_batch(keys) if ssd_tier is not None else [False] * len(keys)
        in_dram = dram_tier.contains_batch(keys) if dram_tier is not None else [False] * len(keys)
        with self._lock:
            placement = self._placement
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

    def _note_dram_hits(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], nbytes: int
    ) -> tuple[list[tuple[str, str]], list[str]]:
        """The placement's bookkeeping of reads DRAM served to another process (``served_arena``,
        on the worker, after the lookup was answered); returns what to drop and demote."""
        with self._lock:
            placement = self._placement_for(nbytes)
            self._forget_reclaimed(placement)
            for key, ctx in zip(keys, ctxs, strict=True):
                if placement.hit(key, ctx) is None:  # held but unknown (a race, or a restart)
                    placement.adopt(key, ctx._replace(promoted=True), DRAM)
            return placement.settle()

    def _settle_deferred(self, deadline: float) -> None:
        """Wait (up to ``deadline``) for deferred placement work (served commits and reads), so
        the placement knows every page DRAM holds before it frees room."""
        with contextlib.suppress(RuntimeError, TimeoutError):
            self._worker.submit(lambda: None).result(min(max(0.0, deadline - time.monotonic()), 3600.0))

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
            with self._lock:
                if epoch is not None and epoch != self._clear_epoch:
                    return []
                placement = self._placement_for(nbytes)
                self._forget_reclaimed(placement)
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
        with self._lock:
            if epoch is not None and (epoch != self._clear_epoch or epoch & 1):
                self.counts["reads_across_clear"] += 1
                return []
            placement = self._placement_for(nbytes)
            self._forget_reclaimed(placement)
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
    @_gated
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
        if not keys:
            return []
        if self.frozen or (self.clearing and self.tenant_of(keys[0]) in self.clearing):
            # frozen, or the tenant is being cleared: SGLang keeps the pages in its host pool
            self.counts["refused_frozen"] += len(keys)
            self._tenant_count(keys[0], set_pages=len(keys), set_refused_frozen=len(keys))
            return [False] * len(keys)
        epoch = self._clear_epoch
        if epoch & 1:  # a clear runs: nothing is published until it is done
            self.counts["refused_clearing"] += len(keys)
            return [False] * len(keys)
        deadline = self._deadline(deadline)
        sizes = pages_sizes(parts)
        ctxs = set_contexts(keys, prefix_len or 0, prev_key, sizes, obj_type=obj_type)
        kept = (
            self._put_local(keys, parts, ctxs, sizes, deadline, supersedes, self._fence())
            if self.local
            else [None] * len(keys)
        )
        # kept: True placed locally, None not placed by decision (refused, or no local tier),
        # False a copy that could not be made in time
        # a refusal is a decision (True) unless a pool was to take the page instead
        # (one C-level pass: ``k is True or (k is None and not self.pools)``)
        stored = list(
            map(operator.is_, kept, repeat(True)) if self.pools else map(operator.is_not, kept, repeat(False))
        )
        for pool in self.pools:
            # write-through pools get every page they lack; the others the pages not kept locally
            want = [i for i, k in enumerate(kept) if pool.write_through or k is not True]
            if not want:
                continue
            if self._clear_epoch != epoch:  # a clear since the set began: its pages stay out
                self.counts["pool_writes_skipped_clear"] += len(want)
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
        self._tenant_count(keys[0], set_pages=len(keys), set_stored_pages=sum(stored))
        return stored

    def _put_local(
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
        unfit = self._too_large(sizes)
        if unfit:
            fit = [i for i in range(len(keys)) if i not in unfit]
            kept: list[bool | None] = [False] * len(keys)
            if fit:
                placed = self._put_local(
                    [keys[i] for i in fit], [parts[i] for i in fit], [ctxs[i] for i in fit],
                    [sizes[i] for i in fit], deadline, supersedes, fence,
                )  # fmt: skip
                for i, k in zip(fit, placed, strict=True):
                    kept[i] = k
            return kept
        dram, n = self.dram, len(keys)
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
            outcomes, drops, demote = self._decide_sets(keys, ctxs, sizes[0], supersedes)
            landed = set(compress(new, ok))
            dropped = {key for key, _tier in drops}
            if dropped or not all(map(_TO_DRAM.__contains__, outcomes)):
                unwanted = [i for i in landed if outcomes[i] not in _TO_DRAM or keys[i] in dropped]
                dram.remove_batch([keys[i] for i in unwanted])
                landed.difference_update(unwanted)
        else:
            outcomes, drops, demote = self._decide_sets(keys, ctxs, sizes[0], supersedes)
        self._apply(drops, demote)
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
            failed.extend(self._copy_into_dram(dram, keys, parts, ctxs, to_dram, landed, deadline, fence[0]))
        if to_ssd and (ssd := self.ssd) is not None:
            ok = ssd.put_batch([(keys[i], parts[i], ctxs[i]) for i in to_ssd], deadline, fence[1])
            failed.extend(i for i, good in zip(to_ssd, ok, strict=True) if not good)
        if failed:
            self._unplace(keys, outcomes, failed, kept)
        if (mover := self.mover) is not None and self.options.ssd_write_through:
            mover.copy_later([keys[i] for i in sorted(landed) if outcomes[i] == SetOutcome.NEW_DRAM])
        return kept

    def _too_large(self, sizes: Sequence[int]) -> set[int]:
        """Indices of pages some local tier cannot hold at all (larger than DRAM's slab, than an
        SSD region): counted by each such tier as its own ``too_large`` refusal, logged once per
        size with the limits."""
        lay = self._layout
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

    def _copy_into_dram(
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
        no room in time (``_with_dram_room``). ``dram``: the tier the call started with (a runtime
        detach may have published a new layout since; the tier stays usable until the call ends).
        ``generation``: DRAM's clear fence when the set started (``DramTier.put_batch``)."""

        def attempt(missing: list[int]) -> list[bool]:
            ok = dram.put_batch([(keys[i], parts[i], ctxs[i]) for i in missing], deadline, generation)
            landed.update(i for i, good in zip(missing, ok, strict=True) if good)
            return ok

        return self._with_dram_room(keys, ctxs, idx, attempt, deadline)

    def _with_dram_room(
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
        mover = self.mover  # one layout for the whole call (a runtime change publishes a new one)
        for step in range(3):
            if step == 1 and mover is not None and self.options.wait_for_room:
                self.counts["waits_for_room"] += 1
                mover.make_room(ctxs[missing[0]].size, len(missing), deadline)
            elif step == 2:
                self._settle_deferred(deadline)
                size = ctxs[missing[0]].size
                # short of slots, not bytes: only pages that make room for this class leave
                plan = dram.room_plan(size) if (dram := self.dram) is not None else None
                strays: list[str] = []
                with self._lock:
                    placement = self._placement_for(size)
                    if plan is None:
                        drops, demote = placement.free_dram(
                            sum(ctxs[i].size for i in missing), keys[missing[0]]
                        )
                    else:
                        drops, demote, strays = placement.free_dram_room(plan, len(missing), keys[missing[0]])
                if strays and dram is not None:
                    dram.remove_batch(strays)  # DRAM held them, the placement did not know them
                self._apply(drops, demote)
                if demote and mover is not None and self.options.wait_for_room:
                    mover.make_room(ctxs[missing[0]].size, len(missing), deadline)
            ok = attempt(missing)
            missing = [i for i, good in zip(missing, ok, strict=True) if not good]
            if not missing or time.monotonic() >= deadline:
                break
        return missing

    def _decide_sets(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        nbytes: int,
        supersedes: Sequence[str] = (),
    ) -> tuple[list[SetOutcome], list[tuple[str, str]], list[str]]:
        """Placement bookkeeping of a set: one placement call per key, then what to drop/demote.
        Superseded objects are marked first, so they are what makes room for the new ones."""
        with self._lock:
            placement = self._placement_for(nbytes)
            self._forget_reclaimed(placement)
            if supersedes:
                placement.supersede(supersedes, keys[-1])
            outcomes = placement.set_batch(keys, ctxs)
            refused = outcomes.count(SetOutcome.REFUSED)
            if refused:
                self.counts["not_admitted"] += refused
            drops, demote = placement.settle()
        return outcomes, drops, demote

    def _unplace(
        self,
        keys: Sequence[str],
        outcomes: Sequence[SetOutcome],
        failed: Sequence[int],
        kept: list[bool | None],
    ) -> None:
        """Pages whose copy could not be made in time: a new page is forgotten (False: SGLang
        keeps it in its host pool); a page moving up from SSD stays placed on SSD."""
        with self._lock:
            placement = self._placement
            for i in failed:
                if outcomes[i] == SetOutcome.UP:
                    if placement is not None:
                        placement.leave_dram(keys[i])
                    continue
                kept[i] = False
                if placement is not None:
                    placement.remove(keys[i])
            self.counts["local_put_failed"] += len(failed)

    def _apply(self, drops: Sequence[tuple[str, str]], demote: Sequence[str]) -> None:
        """Remove dropped pages from both local tiers; hand DRAM overflow to the mover."""
        if drops:
            keys = list(map(_DROP_KEY, drops))
            if (dram := self.dram) is not None:
                dram.remove_batch(keys)
            if (ssd := self.ssd) is not None:
                for key in keys:
                    ssd.remove(key)
            self.counts["dropped"] += len(drops)
            for tier, n in Counter(map(_DROP_TIER, drops)).items():  # per tier: evictions (metrics)
                self.counts[f"dropped_{tier}"] += n
        if demote:
            self.counts["demotions"] += len(demote)
            mover, dram = self.mover, self.dram
            if mover is not None:
                mover.demote_later(demote)
            elif dram is not None:  # no SSD: nothing to demote to (the placement never asks)
                dram.remove_batch(list(demote))

    # ------------------------------------------------------------------ the rest of the contract
    @_gated
    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """Caller memory that pages will be copied from and into (SGLang's host pool buffers),
        announced once before the first call: tiers whose transport must register memory (RDMA
        memory regions, Mooncake's ``register_buffer``) do it here; the others ignore it. A
        tier that cannot register keeps working through its slower path (never raises). A tier
        attached later gets the same regions."""
        self._regions.extend(regions)
        for tier in self.tiers:
            tier.register_memory(regions)

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    @_gated
    def remove(self, key: str) -> bool:
        with self._lock:
            if self._placement is not None:
                self._placement.remove(key)
        return any([tier.remove(key) for tier in self.tiers])

    def _fence(self) -> tuple[int | None, int | None]:
        """What an operation reads before it takes any bytes it may publish later: DRAM's clear
        fence and the SSD epoch (None for a tier the store lacks)."""
        dram, ssd = self.dram, self.ssd
        return (dram.generation if dram is not None else None, ssd.epoch if ssd is not None else None)

    @property
    def tenant_fence(self) -> int:
        """The tenant-clear fence: what an operation that may publish a page after the call that
        took it (a served reservation) reads before it takes bytes; odd while a tenant clear runs."""
        return self._tenant_fence

    def tenants_cleared_since(self, fence: int) -> set[str] | None:
        """Tenants whose clear ran (or runs) since ``tenant_fence`` read ``fence``: their pages
        taken before must not be published (a tenant being cleared counts, also for a ``fence``
        read during its clear). None: every tenant (older than the log)."""
        with self._lock:
            if fence == self._tenant_fence and not fence & 1:
                return set()
            log_ = self._tenant_clears
            if len(log_) >= TENANT_CLEAR_LOG and fence < log_[0][1]:
                return None
            return {tenant for tenant, end in log_ if end > fence} | set(self.clearing)

    @property
    def clear_epoch(self) -> int:
        """How many clears started and finished: even while none runs, odd during one."""
        return self._clear_epoch

    @_gated
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
        with self._clear_mutex:
            dram = self.dram
            with self._lock:
                self._clear_epoch += 1
                if dram is not None:
                    dram.begin_clear()
                if self._placement is not None:
                    self._placement.clear()
                self._reclaimed.clear()
            try:
                for tier in self.tiers:
                    tier.clear()
            finally:
                with self._lock:
                    self._clear_epoch += 1
                    if dram is not None:
                        dram.end_clear()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until deferred bookkeeping and background moves are done (tests, replay)."""
        self._worker.submit(lambda: None).result(timeout_s)
        mover = self.mover
        return mover.flush(timeout_s) if mover is not None else True

    def close(self, flush_timeout_s: float = 0.0) -> None:
        """Stop background movement (it reads DRAM and writes SSD); with a flush timeout, copy the
        DRAM pages the SSD lacks to the SSD (bounded by it); write the warm-restart snapshot; then
        close every tier."""
        self.closed = True
        if self.warm is not None:
            self.warm.stop_rewarm()
        # a runtime change in progress sees ``closed`` at its next step and ends (bounded)
        got = self._changes.acquire(timeout=max(self.options.timeout_s, 5.0))
        if got:
            self._changes.release()
        self._worker.shutdown(wait=True)
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
        self.events = sink
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
            "tiers": self._layout.names(),
            "frozen": self.frozen,
            "calls_in_flight": self._gate.in_flight,
        }
        with self._lock:
            placement = self._placement
            ledger = self._ledger.stats()
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
