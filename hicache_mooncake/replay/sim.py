"""Replay driver and the payload-free two-tier model it runs in ``--mode sim``.

The driver talks to a store the way SGLang's HiCache talks to its storage backend, one request at
a time: ``batch_exists`` on the request's keys in prefix order (how many leading keys are stored),
``batch_get`` of that hit run, then ``batch_set`` of the rest with the hit run as
``prefix_keys`` (SGLang's ``HiCacheStorageExtraInfo.prefix_keys``). Anything that implements
``ReplayStore`` can be driven: ``SimTieredStore`` below (policies only, no bytes) or an adapter
around the real ``TieredStore`` (``--mode store``); both must report the same hits.

``SimTieredStore`` models the two tiers the way ``TieredStore`` runs them: DRAM holds
``dram_blocks``, SSD the rest; every set goes to DRAM (subject to the DRAM policy's admission; a
refused block is offered to SSD); a DRAM eviction demotes the victim to SSD (subject to the SSD
policy's admission, else it is dropped); an SSD hit promotes the block to DRAM (it leaves SSD:
the tiers are exclusive, so the capacity is ``dram_blocks + ssd_blocks`` distinct blocks and two
LRU tiers behave exactly like one LRU of the total size).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hicache_mooncake.tiers.policy import AccessContext, EvictionPolicy, make_policy


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
    keys: Sequence[str], prefix_keys: Sequence[str], now: float = 0.0, size: int = 0
) -> list[AccessContext]:
    """The ``AccessContext`` of each key of a ``batch_set`` (what the backend knows).

    ``position`` is the key's index in the call, ``batch_len`` the call's length, ``prefix_hits``
    the number of prefix keys found before the call (``len(prefix_keys)``), and ``prev_key`` the key
    just before it in the chain (the last prefix key for the first one).
    """
    n = len(keys)
    hits = len(prefix_keys)
    prev: str | None = prefix_keys[-1] if prefix_keys else None
    out = []
    for i, key in enumerate(keys):
        out.append(
            AccessContext(now=now, position=i, batch_len=n, prefix_hits=hits, size=size, prev_key=prev)
        )
        prev = key
    return out


def get_contexts(keys: Sequence[str], now: float = 0.0, size: int = 0) -> list[AccessContext]:
    """The ``AccessContext`` of each key of a ``batch_get`` of a hit run."""
    n = len(keys)
    out = []
    prev: str | None = None
    for i, key in enumerate(keys):
        out.append(AccessContext(now=now, position=i, batch_len=n, prefix_hits=n, size=size, prev_key=prev))
        prev = key
    return out


@dataclass
class SimTieredStore:
    """Payload-free DRAM + SSD model driven by real policy objects (see the module docstring)."""

    dram_blocks: int
    ssd_blocks: int
    dram_policy: EvictionPolicy
    ssd_policy: EvictionPolicy
    block_bytes: int = 0
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_COUNTERS, 0))
    _ctx: dict[str, AccessContext] = field(default_factory=dict)
    _clock: float = 0.0

    @classmethod
    def build(
        cls,
        policy: str,
        capacity_blocks: int,
        dram_fraction: float = 1.0,
        block_bytes: int = 0,
        **options: Any,
    ) -> SimTieredStore:
        if not 0.0 <= dram_fraction <= 1.0:
            raise ValueError(f"dram fraction must be in [0, 1], got {dram_fraction}")
        dram = round(capacity_blocks * dram_fraction)
        dram_options = dict(options)
        if capacity_blocks - dram > 0:
            # A policy may want other options where its evictions are demotions, not losses.
            probe = make_policy(policy, **options)
            dram_options.update(getattr(probe, "upper_tier_options", {}))
        return cls(
            dram_blocks=dram,
            ssd_blocks=capacity_blocks - dram,
            dram_policy=make_policy(policy, **dram_options),
            ssd_policy=make_policy(policy, **options),
            block_bytes=block_bytes,
        )

    # ---- ReplayStore -------------------------------------------------------------------------
    def batch_exists(self, keys: Sequence[str]) -> int:
        self._clock += 1.0
        dram, ssd = self.dram_policy, self.ssd_policy
        n = 0
        for key in keys:
            if key in dram or key in ssd:
                n += 1
            else:
                break
        if n < len(keys):
            ctx = AccessContext(now=self._clock, position=n, batch_len=len(keys), prefix_hits=n)
            dram.on_miss(keys[n], ctx)
            ssd.on_miss(keys[n], ctx)
        return n

    def batch_get(self, keys: Sequence[str]) -> list[bool]:
        out = []
        c = self.counters
        for key, ctx in zip(keys, get_contexts(keys, self._clock, self.block_bytes), strict=True):
            if key in self.dram_policy:
                self.dram_policy.on_hit(key, ctx)
                c["dram_hits"] += 1
                out.append(True)
            elif key in self.ssd_policy:
                self.ssd_policy.on_hit(key, ctx)
                c["ssd_hits"] += 1
                self._promote(key, ctx)
                out.append(True)
            else:
                out.append(False)
        return out

    def batch_set(self, keys: Sequence[str], prefix_keys: Sequence[str] = ()) -> list[bool]:
        ctxs = set_contexts(keys, prefix_keys, self._clock, self.block_bytes)
        for key, ctx in zip(keys, ctxs, strict=True):
            self._set_one(key, ctx)
        return [True] * len(keys)

    def replay_stats(self) -> dict[str, int]:
        return dict(self.counters)

    # ---- internals ---------------------------------------------------------------------------
    def _set_one(self, key: str, ctx: AccessContext) -> None:
        if key in self.dram_policy:
            self.dram_policy.on_insert(key, ctx)  # already stored: values are immutable, a touch
            self._ctx[key] = ctx
            return
        if key in self.ssd_policy:
            self.ssd_policy.on_insert(key, ctx)
            self._ctx[key] = ctx
            return
        self._ctx[key] = ctx
        if self.dram_blocks > 0 and self.dram_policy.should_admit(key, ctx):
            self._dram_insert(key, ctx)
        else:
            if self.dram_blocks > 0:
                self.counters["dram_admit_refused"] += 1
            self._ssd_insert(key, ctx)

    def _placed(self, key: str, tier: str | None) -> None:
        """Hook: ``key`` now lives in ``tier`` ("dram", "ssd") or nowhere (``None``)."""

    def _dram_insert(self, key: str, ctx: AccessContext) -> None:
        dram = self.dram_policy
        dram.on_insert(key, ctx)
        self._placed(key, "dram")
        while len(dram) > self.dram_blocks:
            victim = dram.pop_victim()
            if victim is None:
                break
            self.counters["dram_evictions"] += 1
            vctx = self._ctx.get(victim)
            if vctx is not None:
                vctx = dataclasses.replace(vctx, now=self._clock, demoted=True, promoted=False)
            else:
                vctx = AccessContext(now=self._clock, demoted=True)
            if self._ssd_insert(victim, vctx):
                self.counters["demotions"] += 1

    def _ssd_insert(self, key: str, ctx: AccessContext) -> bool:
        ssd = self.ssd_policy
        if self.ssd_blocks <= 0 or not ssd.should_admit(key, ctx):
            if self.ssd_blocks > 0:
                self.counters["ssd_admit_refused"] += 1
            self._ctx.pop(key, None)
            self._placed(key, None)
            return False
        ssd.on_insert(key, ctx)
        self._placed(key, "ssd")
        self.counters["ssd_writes"] += 1
        while len(ssd) > self.ssd_blocks:
            victim = ssd.pop_victim()
            if victim is None:
                break
            self.counters["ssd_evictions"] += 1
            self._ctx.pop(victim, None)
            self._placed(victim, None)
        return key in ssd

    def _promote(self, key: str, ctx: AccessContext) -> None:
        if self.dram_blocks <= 0:
            return
        self.ssd_policy.on_remove(key)
        self.counters["promotions"] += 1
        self._dram_insert(key, dataclasses.replace(ctx, promoted=True))


@dataclass
class ReplayOutcome:
    requests: int = 0
    blocks: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.blocks if self.blocks else 0.0


def drive(
    reqs: Iterable[Sequence[int]],
    store: ReplayStore,
    key_of: Callable[[int], str] = str,
    progress: Callable[[int], None] | None = None,
) -> ReplayOutcome:
    """Replay ``reqs`` (block-id lists) against ``store`` with SGLang's call sequence.

    Per request: ``n = batch_exists(keys)``; ``batch_get(keys[:n])``, whose leading successes are
    the request's hits; ``batch_set(keys[hits:], prefix_keys=keys[:hits])``.
    """
    out = ReplayOutcome()
    for req in reqs:
        keys = [key_of(b) for b in req]
        n = store.batch_exists(keys)
        hits = 0
        if n:
            for ok in store.batch_get(keys[:n]):
                if not ok:
                    break
                hits += 1
        if hits < len(keys):
            store.batch_set(keys[hits:], prefix_keys=keys[:hits])
        out.requests += 1
        out.blocks += len(keys)
        out.hits += hits
        if progress is not None:
            progress(1)
    return out
