"""``TieredStore``: the one store. Local DRAM and SSD placed by ONE policy; the shared pool beside.

Tiers: an optional ``DramTier``, an optional ``SsdTier`` and any number of pool tiers (the remote
DRAM pool). ``policy.placement.TierPlacement`` owns the local capacity: its policy decides which
pages leave the host, DRAM holds the most recently used of them, and every get or set asks it
once per key (``set`` / ``hit``). This class is the coordinator: each data call is gated
(``CallGate``) and handed to the module that owns its path (``set_path``, ``get_path``,
``lookups``); runtime changes go to ``runtime_ops``, warm restart to ``rewarm``. What they do:

- set: new pages are copied into free DRAM from the caller's buffers (with no DRAM tier: written
  to SSD within the call's deadline); pages the policy refuses are a decision, not a failure (True,
  counted ``not_admitted``); pages that find no DRAM room in time are False (SGLang keeps them),
  and so are pages larger than a local tier can hold (counted as that tier's ``too_large``
  refusal; the policy is not asked, so nothing is demoted or dropped to make room for them) and
  pages whose key is stored already with another size (``refused_other_size``);
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
from typing import Any

from .dram_tier import DramTier
from .events_sink import EventsSink
from .get_path import GetPath
from .lookups import Lookups
from .mover import Mover
from .parts import Parts
from .policy import EvictionPolicy, ObjectType
from .policy.hints import Hints
from .policy.placement import TierPlacement
from .policy.quotas import TenantShare, default_tenant
from .progress import Progress
from .rewarm import WarmKeeper
from .runtime_ops import RuntimeOps
from .served_arena import ServedArena
from .set_path import SetPath
from .ssd_tier import SsdTier
from .store_options import StoreOptions, WarmOptions
from .store_state import StoreState, gated
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
        self.lookups = Lookups(state)
        self.get_path = GetPath(state)
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

    # ------------------------------------------------------------------ existence (lookups.py)
    @gated
    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many leading ``keys`` some tier holds."""
        return self.lookups.exists(keys)[1]

    @gated
    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        """Per key: does some tier hold it? The first missing key is told to the policy."""
        return self.lookups.exists(keys)[0]

    @gated
    def contains_batch(self, keys: Sequence[str]) -> list[bool]:
        """Per key, whether some tier holds it (no prefix cut: a hybrid model's sidecar objects
        have holes that matter). Tells the policy nothing."""
        return self.lookups.contains(keys)

    @gated
    def where_batch(self, keys: Sequence[str], pools: bool = False) -> list[str | None]:
        """Per key, the name of the fastest tier holding it (``Lookups.where``): read-only."""
        return self.lookups.where(keys, pools)

    # ------------------------------------------------------------------ reads (get_path.py)
    @gated
    def get_batch_into(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        obj_type: ObjectType = ObjectType.KV_PAGE,
        deadline: float | None = None,
    ) -> list[bool]:
        """Read ``keys`` into ``parts`` (module docstring; the steps: ``get_path``)."""
        return self.get_path.get(keys, parts, obj_type, deadline)

    # ------------------------------------------------------------------ writes (set_path.py)
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
