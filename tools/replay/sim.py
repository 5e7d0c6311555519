"""Replay driver and the payload-free two-tier model it runs in ``--mode sim``.

The driver talks to a store the way SGLang's HiCache talks to its storage backend, one request at
a time: ``batch_exists`` on the request's keys in prefix order (how many leading keys are stored),
``batch_get`` of that hit run, then ``batch_set`` of the rest with the hit run as
``prefix_keys`` (SGLang's ``HiCacheStorageExtraInfo.prefix_keys``). Anything that implements
``ReplayStore`` can be driven: ``SimTieredStore`` below (policies only, no bytes) or an adapter
around the real ``TieredStore`` (``--mode store``); both must report the same hits.

``SimTieredStore`` places pages the way the real store does (``TierPlacement``): ONE policy
instance owns the total capacity and decides what leaves the system; DRAM holds the most recently
used ``dram_blocks`` of the resident pages (a DRAM overflow demotes its LRU page to SSD, an SSD
hit promotes the page back). Total hits therefore do not depend on the DRAM share; the split only
decides the DRAM share of hits and the bytes moved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hicache_mooncake.tiers.policy import AccessContext, EvictionPolicy, ObjectType, make_policy
from hicache_mooncake.tiers.policy.contexts import get_contexts as _get_contexts
from hicache_mooncake.tiers.policy.contexts import miss_context
from hicache_mooncake.tiers.policy.contexts import set_contexts as _set_contexts
from hicache_mooncake.tiers.policy.hints import Hints
from hicache_mooncake.tiers.policy.placement import DRAM, SSD, SetOutcome, TierPlacement


@runtime_checkable
class ReplayStore(Protocol):
    """What the replay driver needs from a store (the SGLang-facing calls, keys only)."""

    def batch_exists(self, keys: Sequence[str]) -> int:
        """How many leading ``keys`` are stored (any tier)."""
        ...

    def batch_get(self, keys: Sequence[str]) -> list[bool]:
        """Read ``keys`` (the hit run); per-key success."""
        ...

    def batch_set(self, keys: Sequence[str], prefix_keys: Sequence[str] = ()) -> list[bool]:
        """Store ``keys``, which follow ``prefix_keys`` in the request; per-key success."""
        ...

    def replay_stats(self) -> dict[str, int]:
        """Counters (see ``TIER_COUNTERS``) since construction."""
        ...


#: Counters every ``ReplayStore.replay_stats`` reports (block counts; bytes are derived).
TIER_COUNTERS = (
    "dram_hits",
    "ssd_hits",
    "promotions",
    "demotions",
    "ssd_writes",
    "dram_evictions",
    "ssd_evictions",
    "dram_admit_refused",
    "ssd_admit_refused",
)


def set_contexts(
    keys: Sequence[str],
    prefix_keys: Sequence[str],
    now: float = 0.0,
    size: int = 0,
    obj_type: ObjectType = ObjectType.KV_PAGE,
) -> list[AccessContext]:
    """Contexts of a ``batch_set`` (``tiers.policy.contexts``, shared with TieredStore)."""
    prev = prefix_keys[-1] if prefix_keys else None
    return _set_contexts(keys, len(prefix_keys), prev, size, now, obj_type)


def get_contexts(
    keys: Sequence[str],
    now: float = 0.0,
    size: int = 0,
    request_len: int = 0,
    obj_type: ObjectType = ObjectType.KV_PAGE,
) -> list[AccessContext]:
    """Contexts of a ``batch_get`` of a hit run (``tiers.policy.contexts``)."""
    return _get_contexts(keys, size, request_len, now, obj_type)


@dataclass
class SimTieredStore:
    """Payload-free DRAM + SSD model driven by one real policy (see the module docstring)."""

    placement: TierPlacement
    block_bytes: int = 0
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_COUNTERS, 0))
    _clock: float = 0.0
    _request_len: int = 0  # keys of the last batch_exists: the request a batch_get belongs to
    _on_ssd: set[str] = field(default_factory=set)  # resident pages with an SSD copy

    @classmethod
    def build(
        cls,
        policy: str,
        capacity_blocks: int,
        dram_fraction: float = 1.0,
        block_bytes: int = 0,
        hints: Hints | None = None,
        wrap: Callable[[EvictionPolicy], EvictionPolicy] | None = None,
        type_aware: bool = True,
        **options: Any,
    ) -> SimTieredStore:
        """``hints``: the store's ``Hints`` (as ``TieredStore.hints``); ``wrap``: put something
        between the placement and the policy (``timing.CallRecorder``); ``type_aware``: as
        ``tiers.type_aware_eviction``."""
        if not 0.0 <= dram_fraction <= 1.0:
            raise ValueError(f"dram fraction must be in [0, 1], got {dram_fraction}")
        unit = block_bytes or 1  # the placement charges each page its size (1 without payloads)
        dram = round(capacity_blocks * dram_fraction)
        policy_obj = make_policy(policy, **options)
        if wrap is not None:
            policy_obj = wrap(policy_obj)
        placement = TierPlacement(
            policy_obj, capacity_blocks * unit, dram * unit, hints=hints, type_aware=type_aware
        )
        return cls(placement=placement, block_bytes=block_bytes)

    @property
    def hints(self) -> Hints | None:
        return self.placement.hints

    @property
    def policy(self) -> EvictionPolicy:
        return self.placement.policy

    @property
    def dram_blocks(self) -> int:
        return self.placement.dram_capacity // (self.block_bytes or 1)

    @property
    def ssd_blocks(self) -> int:
        return (self.placement.capacity - self.placement.dram_capacity) // (self.block_bytes or 1)

    # ---- ReplayStore -------------------------------------------------------------------------
    def batch_exists(self, keys: Sequence[str]) -> int:
        self._clock += 1.0
        self._request_len = len(keys)
        pl = self.placement
        n = 0
        for key in keys:
            if key in pl:
                n += 1
            else:
                break
        if n < len(keys):
            pl.miss(keys[n], miss_context(n, len(keys), self._clock))
        return n

    def batch_get(
        self, keys: Sequence[str], obj_type: ObjectType = ObjectType.KV_PAGE, size: int | None = None
    ) -> list[bool]:
        """``obj_type``/``size`` (default: a KV page of ``block_bytes``) for sidecar objects."""
        out = []
        c = self.counters
        nbytes = self.block_bytes if size is None else size
        for key, ctx in zip(
            keys, get_contexts(keys, self._clock, nbytes, self._request_len, obj_type), strict=True
        ):
            tier = self.placement.hit(key, ctx)
            if tier == DRAM:
                c["dram_hits"] += 1
            elif tier == SSD:
                c["ssd_hits"] += 1
                if self.placement.dram_capacity > 0:
                    c["promotions"] += 1
                    self._placed(key, DRAM)
            out.append(tier is not None)
            self._settle()
        return out

    def batch_set(
        self,
        keys: Sequence[str],
        prefix_keys: Sequence[str] = (),
        obj_type: ObjectType = ObjectType.KV_PAGE,
        size: int | None = None,
        supersedes: Sequence[str] = (),
    ) -> list[bool]:
        """``obj_type``/``size``/``supersedes`` as ``TieredStore.put_batch`` (sidecar objects)."""
        nbytes = self.block_bytes if size is None else size
        ctxs = set_contexts(keys, prefix_keys, self._clock, nbytes, obj_type)
        if supersedes and keys:
            self.placement.supersede(supersedes, keys[-1])
        out = []
        for key, ctx in zip(keys, ctxs, strict=True):
            outcome = self.placement.set(key, ctx)
            if outcome == SetOutcome.REFUSED:
                if key not in self.placement:
                    refused = (
                        "dram_admit_refused" if self.placement.dram_capacity > 0 else "ssd_admit_refused"
                    )
                    self.counters[refused] += 1
            elif outcome in (SetOutcome.NEW_DRAM, SetOutcome.UP):
                self._placed(key, DRAM)
            elif outcome == SetOutcome.NEW_SSD:
                self._placed(key, SSD)
                self.counters["ssd_writes"] += 1
                self._on_ssd.add(key)
            out.append(outcome != SetOutcome.REFUSED)
            self._settle()
        return out

    def replay_stats(self) -> dict[str, int]:
        return dict(self.counters)

    # ---- internals ---------------------------------------------------------------------------
    def _settle(self) -> None:
        c = self.counters
        drops, demotions = self.placement.settle()
        on_ssd = self._on_ssd
        for key, tier in drops:
            c["dram_evictions" if tier == DRAM else "ssd_evictions"] += 1
            on_ssd.discard(key)
            self._placed(key, None)
        for key in demotions:
            c["dram_evictions"] += 1
            c["demotions"] += 1
            if key not in on_ssd:  # a page promoted from SSD still has its copy there
                c["ssd_writes"] += 1
                on_ssd.add(key)
            self._placed(key, SSD)

    def _placed(self, key: str, tier: str | None) -> None:
        """Hook: ``key`` now lives in ``tier`` ("dram", "ssd") or nowhere (``None``)."""


class SidecarHook(Protocol):
    """Sidecar objects next to a request's KV pages (``sidecars.py``)."""

    def restore(self, index: int, keys: list[str], hits: int) -> int:
        """After the KV hit run of ``hits`` pages: how many leading pages can be restored."""
        ...

    def stored(self, index: int, keys: list[str]) -> None:
        """After the request's KV pages were stored."""
        ...


@dataclass
class ReplayOutcome:
    requests: int = 0
    blocks: int = 0
    hits: int = 0
    restorable: int = 0
    """With sidecars: leading pages whose end page's state was cached too (else 0)."""

    @property
    def hit_rate(self) -> float:
        return self.hits / self.blocks if self.blocks else 0.0


def drive(
    reqs: Iterable[Sequence[int]],
    store: ReplayStore,
    key_of: Callable[[int], str] = str,
    progress: Callable[[int], None] | None = None,
    prefix_keys: bool = True,
    before: Callable[[int, list[str]], None] | None = None,
    sidecars: SidecarHook | None = None,
) -> ReplayOutcome:
    """Replay ``reqs`` (block-id lists) against ``store`` with SGLang's call sequence.

    Per request: ``before(index, keys)`` (hints), ``n = batch_exists(keys)``; ``batch_get(keys[:n])``,
    whose leading successes are the request's hits; ``batch_set(keys[hits:],
    prefix_keys=keys[:hits])`` (no prefix keys with ``prefix_keys=False``: SGLang's default
    ``hicache_storage_pass_prefix_keys: false``). ``sidecars``: ``restore`` after the get,
    ``stored`` after the set.
    """
    out = ReplayOutcome()
    for i, req in enumerate(reqs):
        keys = [key_of(b) for b in req]
        if before is not None:
            before(i, keys)
        n = store.batch_exists(keys)
        hits = 0
        if n:
            for ok in store.batch_get(keys[:n]):
                if not ok:
                    break
                hits += 1
        if sidecars is not None:
            out.restorable += sidecars.restore(i, keys, hits)
        if hits < len(keys):
            store.batch_set(keys[hits:], prefix_keys=keys[:hits] if prefix_keys else ())
        if sidecars is not None:
            sidecars.stored(i, keys)
        out.requests += 1
        out.blocks += len(keys)
        out.hits += hits
        if progress is not None:
            progress(1)
    return out
