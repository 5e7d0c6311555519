"""``StoreState``: the shared state of one ``TieredStore``, and the bookkeeping steps on it that
every face of the store shares.

The store's faces (``tiered_store.TieredStore`` for in-process calls, ``served_arena.ServedArena``
for clients that copy bytes themselves, ``runtime_ops.RuntimeOps`` for runtime changes,
``rewarm.WarmKeeper`` for warm restart) all hold the same ``StoreState`` and touch the store only
through its public attributes and methods. This module imports no face, so ``tiers/`` has no
import cycle: the faces import it, ``tiered_store`` imports the faces.

What it holds, and who may change it:

- ``layout``: the published ``TierLayout`` (one attribute store; ``runtime_ops`` publishes a new
  one); ``gate``: the ``CallGate`` every data call enters; ``changes``: the lock a runtime change
  holds (taken before ``lock``, never by a data call).
- ``lock``: guards ``placement``, ``request_len``, ``tenant_counts``, the fences and the
  ``reclaimed`` queue's consumer. Bookkeeping only: no I/O and no SSD call runs under it; only the
  DRAM tier's index may be touched under it (lock order: store -> DRAM).
- ``placement``: the ``TierPlacement`` (None until the first call that knows an object size,
  ``placement_for``); ``capacity``/``unit``: what its capacities were derived from.
- The clear fence ``clear_epoch`` (even while open, odd while a clear runs) and the tenant-clear
  fence ``tenant_fence`` with its log ``tenant_clears``: bumped under ``lock``.
- ``frozen`` (admin freeze), ``clearing`` (tenants being cleared), ``closed``: read without the
  lock by the data path (a set that read a stale value is caught by the gate's quiesce).
- ``counts``: the store's counters (``stats()["placement"]``).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast

from hicache_mooncake.native import fingerprints

from .dram_tier import DramTier
from .events_sink import NULL_SINK, EventsSink
from .layout import CallGate, TierLayout
from .mover import Mover
from .policy import AccessContext, EvictionPolicy
from .policy.hints import Hints
from .policy.placement import DRAM, SSD, SetOutcome, TierPlacement
from .policy.quotas import TenantLedger, TenantShare
from .ssd_tier import SsdTier
from .store_options import StoreOptions
from .tier import Tier

_DROP_KEY = operator.itemgetter(0)
_DROP_TIER = operator.itemgetter(1)
REQUEST_MEMORY = 1 << 16
"""Requests whose length (``exists``' key count) the store remembers for the reads that follow."""
TENANT_CLEAR_LOG = 256
"""Tenant clears the store remembers (``StoreState.tenants_cleared_since``)."""
_F = TypeVar("_F", bound=Callable[..., Any])


class HoldsState(Protocol):
    state: StoreState


def gated(method: _F) -> _F:
    """A data call of a store face (an object with ``state``): counted by the ``CallGate`` while it
    runs, so runtime changes wait for it (bounded) before they close a tier it may hold."""

    @functools.wraps(method)
    def call(self: HoldsState, *args: Any, **kwargs: Any) -> Any:
        gate = self.state.gate
        gen = gate.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            gate.exit(gen)

    return cast(_F, call)


class StoreState:
    def __init__(
        self,
        tiers: Sequence[Tier],
        policy_factory: Callable[[], EvictionPolicy],
        options: StoreOptions,
        capacity: tuple[int, int] | None,
        hints: Hints,
        tenant_of: Callable[[str], str],
        tenant_shares: Mapping[str, TenantShare] | None,
    ) -> None:
        self.options = options
        self.layout = TierLayout.of(tiers)
        self.gate = CallGate()
        self.changes = threading.Lock()
        self.lock = threading.Lock()
        self.frozen = False
        self.closed = False
        self.new_policy = policy_factory
        self.hints = hints
        self.capacity = capacity
        """Fixed ``(total, dram)`` capacities; None: derived from the tiers (again after a change)."""
        self.unit = 0
        """The object size the placement's capacities were derived with."""
        self.placement: TierPlacement | None = None
        self.ledger = TenantLedger(tenant_of, tenant_shares)
        self.tenant_of = tenant_of
        self.tenant_counts: dict[str, Counter[str]] = {}
        self.counts: Counter[str] = Counter()
        self.reclaimed: deque[str] = deque()
        """Keys the SSD engine dropped (region reclaim), forgotten at the next call."""
        self.request_len: OrderedDict[str, int] = OrderedDict()
        """A request's first key -> its length in keys (from ``exists``), for the reads after it."""
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hicache-placement")
        """Runs work nobody waits for (deferred placement of served pages, ``settle_deferred``)."""
        self.regions: list[memoryview] = []
        """Caller memory registered so far (given to tiers attached later)."""
        self.clearing: set[str] = set()
        self.clear_epoch = 0
        self.clear_mutex = threading.Lock()
        self.tenant_fence = 0
        self.tenant_clears: list[tuple[str, int]] = []
        self.events: EventsSink = NULL_SINK

    # ------------------------------------------------------------------ the tiers (TierLayout)
    @property
    def tiers(self) -> tuple[Tier, ...]:
        return self.layout.tiers

    @property
    def dram(self) -> DramTier | None:
        return self.layout.dram

    @property
    def ssd(self) -> SsdTier | None:
        return self.layout.ssd

    @property
    def pools(self) -> tuple[Tier, ...]:
        return self.layout.pools

    @property
    def mover(self) -> Mover | None:
        return self.layout.mover

    @property
    def local(self) -> bool:
        return self.dram is not None or self.ssd is not None

    def deadline(self, deadline: float | None) -> float:
        """``deadline``, or ``io.timeout_s`` from now when None."""
        return deadline if deadline is not None else time.monotonic() + self.options.timeout_s

    def refuses_sets(self, key: str) -> bool:
        """True while nothing may be written for ``key``'s tenant: frozen, or its tenant clears."""
        return self.frozen or bool(self.clearing and self.tenant_of(key) in self.clearing)

    def hook_ssd(self, ssd: SsdTier) -> None:
        """Hear the SSD engine's reclaims and answer its keep question."""
        ssd.evict_listeners.append(self.reclaimed.append)
        ssd.engine.keep = self.ssd_copy_needed

    def unhook_ssd(self, ssd: SsdTier) -> None:
        if self.reclaimed.append in ssd.evict_listeners:
            ssd.evict_listeners.remove(self.reclaimed.append)
        ssd.engine.keep = None

    # ------------------------------------------------------------------ placement
    def placement_for(self, nbytes: int) -> TierPlacement:
        """The placement, created at the first call that knows an object size (under ``lock``)."""
        if self.placement is None:
            opts = self.options
            if self.capacity is not None:
                total, dram = self.capacity
                low = int(dram * opts.dram_low / opts.dram_high) if self.ssd is not None else dram
            else:
                total, dram, low = self.capacities(self.layout, nbytes)
            self.unit = max(nbytes, 1)
            self.placement = TierPlacement(
                self.new_policy(),
                total,
                dram,
                low,
                hints=self.hints,
                ledger=self.ledger,
                type_aware=opts.type_aware_eviction,
            )
        return self.placement

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

    def forget_reclaimed(self, placement: TierPlacement) -> None:
        """Keys the SSD engine dropped: forgotten unless DRAM still holds them (under ``lock``)."""
        while self.reclaimed:
            key = self.reclaimed.popleft()
            if key in placement and ((dram := self.dram) is None or not dram.contains(key)):
                placement.remove(key)
                self.counts["forgotten"] += 1

    def ssd_copy_needed(self, key: str) -> bool:
        """SSD region reclaim asks: rewrite this entry? Yes while the placement holds the page and
        this SSD copy is its only one. Called under the engine's lock: dict reads only."""
        placement = self.placement
        if placement is None or key not in placement:
            return False
        dram = self.dram
        return placement.tier_of(key) == SSD or dram is None or not dram.contains(key)

    def decide_sets(
        self,
        keys: Sequence[str],
        ctxs: Sequence[AccessContext],
        nbytes: int,
        supersedes: Sequence[str] = (),
    ) -> tuple[list[SetOutcome], list[tuple[str, str]], list[str]]:
        """Placement bookkeeping of a set: one placement call per key, then what to drop/demote.
        Superseded objects are marked first, so they are what makes room for the new ones."""
        with self.lock:
            placement = self.placement_for(nbytes)
            self.forget_reclaimed(placement)
            if supersedes:
                placement.supersede(supersedes, keys[-1])
            outcomes = placement.set_batch(keys, ctxs)
            refused = outcomes.count(SetOutcome.REFUSED)
            if refused:
                self.counts["not_admitted"] += refused
            drops, demote = placement.settle()
        return outcomes, drops, demote

    def note_dram_hits(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], nbytes: int
    ) -> tuple[list[tuple[str, str]], list[str]]:
        """The placement's bookkeeping of reads DRAM served to another process (``served_arena``,
        on the worker, after the lookup was answered); returns what to drop and demote."""
        with self.lock:
            placement = self.placement_for(nbytes)
            self.forget_reclaimed(placement)
            for key, ctx in zip(keys, ctxs, strict=True):
                if placement.hit(key, ctx) is None:  # held but unknown (a race, or a restart)
                    placement.adopt(key, ctx._replace(promoted=True), DRAM)
            return placement.settle()

    def settle(self) -> None:
        """What the placement wants dropped or demoted now, done (``apply``)."""
        with self.lock:
            drops, demote = self.placement.settle() if self.placement is not None else ([], [])
        self.apply(drops, demote)

    def apply(self, drops: Sequence[tuple[str, str]], demote: Sequence[str]) -> None:
        """Remove dropped pages from both local tiers; hand DRAM overflow to the mover."""
        if drops:
            keys = list(map(_DROP_KEY, drops))
            fps = fingerprints(keys)  # once for both tiers
            if (dram := self.dram) is not None:
                dram.remove_batch(keys, fps)
            if (ssd := self.ssd) is not None:
                ssd.remove_batch(keys, fps)
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

    def settle_deferred(self, deadline: float) -> None:
        """Wait (up to ``deadline``) for deferred placement work (served commits and reads), so
        the placement knows every page DRAM holds before it frees room."""
        with contextlib.suppress(RuntimeError, TimeoutError):
            self.worker.submit(lambda: None).result(min(max(0.0, deadline - time.monotonic()), 3600.0))

    def remove(self, key: str) -> bool:
        """Drop ``key`` from the placement and every tier (a data call: counted by the gate);
        True if some tier held it."""
        gen = self.gate.enter()
        try:
            with self.lock:
                if self.placement is not None:
                    self.placement.remove(key)
            return any([tier.remove(key) for tier in self.tiers])
        finally:
            self.gate.exit(gen)

    # ------------------------------------------------------------------ MoveListener (the mover)
    def moved(self, keys: Sequence[str]) -> None:
        """Demoted pages have an SSD copy: free their DRAM slot unless placed in DRAM again. (A
        mover that outlives its DRAM tier, being detached, has nothing to free.)"""
        with self.lock:
            placement = self.placement
            gone = [k for k in keys if placement is None or placement.tier_of(k) != DRAM]
            if (dram := self.dram) is not None:
                dram.remove_batch(gone)

    def lost(self, keys: Sequence[str]) -> None:
        """Demotions that found no SSD room: the pages leave the host (unless wanted in DRAM)."""
        with self.lock:
            placement = self.placement
            gone = [k for k in keys if placement is None or placement.tier_of(k) != DRAM]
            for key in gone:
                if placement is not None:
                    placement.remove(key)
            if (dram := self.dram) is not None:
                dram.remove_batch(gone)
            self.counts["dropped_on_demotion"] += len(gone)

    # ------------------------------------------------------------------ tenants and fences
    def tenant_count(self, key: str, **counts: int) -> None:
        """Count a call for the tenant of ``key`` (its first key)."""
        with self.lock:  # stats() reads the tables under it
            self.tenant_count_locked(key, **counts)

    def tenant_count_locked(self, key: str, **counts: int) -> None:
        tenant = self.ledger.tenant_of(key)
        table = self.tenant_counts.get(tenant)
        if table is None:
            if len(self.tenant_counts) >= self.ledger.max_tenants:
                tenant = "(other)"
            table = self.tenant_counts.setdefault(tenant, Counter())
        for name, count in counts.items():  # not Counter.update: its checks cost ~10 us cold
            table[name] += count

    def fence(self) -> tuple[int | None, int | None]:
        """What an operation reads before it takes any bytes it may publish later: DRAM's clear
        fence and the SSD epoch (None for a tier the store lacks)."""
        dram, ssd = self.dram, self.ssd
        return (dram.generation if dram is not None else None, ssd.epoch if ssd is not None else None)

    def tenants_cleared_since(self, fence: int) -> set[str] | None:
        """Tenants whose clear ran (or runs) since ``tenant_fence`` read ``fence``: their pages
        taken before must not be published (a tenant being cleared counts, also for a ``fence``
        read during its clear). None: every tenant (older than the log)."""
        with self.lock:
            if fence == self.tenant_fence and not fence & 1:
                return set()
            log_ = self.tenant_clears
            if len(log_) >= TENANT_CLEAR_LOG and fence < log_[0][1]:
                return None
            return {tenant for tenant, end in log_ if end > fence} | set(self.clearing)

    def begin_tenant_clear(self, tenant: str) -> None:
        """Mark ``tenant`` as being cleared and close the tenant fence (odd)."""
        with self.lock:
            self.clearing.add(tenant)  # from now on: no set, no promotion of the tenant's pages
            self.tenant_fence += 1

    def end_tenant_clear(self, tenant: str) -> None:
        """Log ``tenant``'s clear at the fence's new (even) value and unmark it."""
        with self.lock:
            self.tenant_fence += 1
            self.tenant_clears.append((tenant, self.tenant_fence))
            del self.tenant_clears[:-TENANT_CLEAR_LOG]
            self.clearing.discard(tenant)
