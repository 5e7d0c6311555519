"""Where each page lives, decided by ONE eviction policy that owns the whole local capacity.

``TierPlacement`` tracks keys and sizes, never bytes. The policy decides which pages leave the
host (``capacity``: what DRAM and SSD hold together); DRAM holds the most recently used of the
resident pages (``dram_capacity``). The store (``tiers.TieredStore``, or the replay simulator)
moves bytes as told. Every call is ONE policy call per key:

- ``set(key, ctx) -> SetOutcome``: a write. New pages are placed in DRAM (SSD when there is no
  DRAM); a page placed only on SSD moves up with the call's bytes; a refused admission is
  ``REFUSED``. ``set_batch`` decides a store call's keys in one pass, as ``set`` one by one.
- ``hit(key, ctx, promote) -> tier``: a read of a resident page; returns where it was. With
  ``promote`` a page read from SSD is placed in DRAM again (the caller copies it up).
- ``adopt(key, ctx, tier)``: a page some tier holds but the placement does not know (recovered
  from SSD after a restart, found in the shared pool) becomes resident in ``tier``.
- ``settle() -> (drops, demotions)``: the pages that left the host since the last call, with the
  tier they were placed in, and the DRAM pages to move to SSD (least recently used first). DRAM
  is demoted from ``dram_capacity`` (the high watermark) down to ``dram_low``.

Object types (``superseded.py``): a trailing sidecar object (Mamba state, SWA window, compressor
state) that a later one of its chain superseded (``supersede``) is dropped, and demoted, before
the policy is asked for a victim; without sidecars nothing changes. ``type_aware=False`` turns
this off (every object is the policy's alone).

Sizes: a page is charged ``ctx.size`` (1 when 0, so a payload-free simulation counts pages), so
pages of different sizes (KV pages, sidecar states) share one capacity.

Invariants (after ``settle``): ``used <= capacity``; DRAM is a subset of the resident pages and
``dram_used <= dram_capacity``; a resident page not in DRAM is placed on SSD; every key the policy
tracks is resident here and vice versa. Total hits do not depend on the DRAM share. Not
thread-safe (the store holds its lock); no I/O.
"""

from __future__ import annotations

import enum
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hicache_mooncake.native import KeyOrder

from .base import TRAILING_TYPES, AccessContext, EvictionPolicy
from .dram_room import RoomPlan, choose
from .hints import Hints
from .quotas import TenantLedger
from .superseded import SupersededSet

DRAM, SSD = "dram", "ssd"
_CTX_SIZE = operator.attrgetter("size")
_CTX_TYPE = operator.attrgetter("obj_type")
_TIER_OF = (SSD, DRAM)  # a victim's tier by whether it was in DRAM


class SetOutcome(enum.IntEnum):
    """What a set means for the bytes of one page."""

    REFUSED = 0
    """Not admitted (or dropped again while making room): nothing to copy."""
    HELD = 1
    """Already placed in DRAM, or on SSD with no DRAM tier: nothing to copy."""
    NEW_DRAM = 2
    """A new page placed in DRAM: copy the call's bytes into DRAM."""
    NEW_SSD = 3
    """A new page placed on SSD (no DRAM tier): copy the call's bytes to SSD."""
    UP = 4
    """A page that was only on SSD moves to DRAM: copy the call's bytes into DRAM."""


@dataclass(frozen=True)
class HottestCut:
    """A copy of the placement's recency orders (``TierPlacement.hottest_cut``)."""

    dram: list[tuple[str, int]]
    placed: list[tuple[str, int]]
    limit: int

    def pages(self) -> list[tuple[str, int, bool]]:
        """``(key, size, in_dram)``, hottest first: DRAM, then the pages placed on SSD only."""
        out = [(key, size, True) for key, size in self.dram]
        if len(out) < self.limit:
            in_dram = {key for key, _ in self.dram}
            ssd = ((key, size, False) for key, size in self.placed if key not in in_dram)
            out.extend(itertools.islice(ssd, self.limit - len(out)))
        return out


class TierPlacement:
    """One eviction policy over DRAM + SSD; DRAM = the most recently used subset (module doc)."""

    def __init__(
        self,
        policy: EvictionPolicy,
        capacity: int,
        dram_capacity: int,
        dram_low: int | None = None,
        hints: Hints | None = None,
        ledger: TenantLedger | None = None,
        type_aware: bool = True,
    ) -> None:
        """``hints``: the store's ``Hints``, handed to the policy (``use_hints``); ``ledger``:
        per-tenant bytes and shares (``quotas.py``); by default one tenant, no shares;
        ``type_aware``: superseded trailing objects go first (module docstring)."""
        if capacity < 0 or not 0 <= dram_capacity <= capacity:
            raise ValueError(f"need 0 <= dram_capacity <= capacity, got {dram_capacity}, {capacity}")
        low = dram_capacity if dram_low is None else dram_low
        if not 0 <= low <= dram_capacity:
            raise ValueError(f"need 0 <= dram_low <= dram_capacity, got {low}, {dram_capacity}")
        self.policy = policy
        self.capacity = capacity
        self.dram_capacity = dram_capacity
        self.dram_low = low
        # resident key -> charged size, in placement order; DRAM keys -> size in LRU order (MRU
        # last). Native ordered maps (``native.KeyOrder``): a batch of pages is one call each.
        self._size = KeyOrder()
        self._dram = KeyOrder()
        self.used = 0
        self.dram_used = 0
        self._drops: list[tuple[str, str]] = []
        self.hints = hints
        if hints is not None:
            policy.use_hints(hints)
        self.ledger = ledger if ledger is not None else TenantLedger()
        self.ledger.set_capacity(capacity, dram_capacity)
        self.type_aware = type_aware
        self.superseded = SupersededSet()

    # ------------------------------------------------------------------ queries
    def tier_of(self, key: str) -> str | None:
        if key in self._dram:
            return DRAM
        return SSD if key in self._size else None

    def placed_on_ssd(self, keys: Sequence[str]) -> list[bool]:
        """Per key, ``tier_of(key) == SSD`` (resident, not in DRAM), in C-level passes."""
        on_dram = map(operator.not_, self._dram.contains_many(keys))
        return list(map(operator.and_, self._size.contains_many(keys), on_dram))

    def __contains__(self, key: object) -> bool:
        return key in self._size

    def __len__(self) -> int:
        return len(self._size)

    @property
    def dram_len(self) -> int:
        return len(self._dram)

    # ------------------------------------------------------------------ decisions
    def set(self, key: str, ctx: AccessContext) -> SetOutcome:
        """A write of ``key`` (one policy call); see ``SetOutcome`` for what to copy."""
        return self.set_batch((key,), (ctx,))[0]

    def set_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[SetOutcome]:
        """``set`` of each key in turn (the same decisions, in one pass: per key, the policy is
        the only call unless room must be made, a tenant has a share or the object is trailing)."""
        if self.capacity <= 0:
            return [SetOutcome.REFUSED] * len(keys)
        fast = self._set_new_batch(keys, ctxs)
        if fast is not None:
            return fast
        on_set, ledger, superseded = self.policy.on_set, self.ledger, self.superseded
        resident, dram = self._size, self._dram
        to_dram, type_aware = self.dram_capacity > 0, self.type_aware
        out: list[SetOutcome] = []
        for key, ctx in zip(keys, ctxs, strict=True):
            before = DRAM if key in dram else SSD if key in resident else None
            if not on_set(key, ctx):
                superseded.gone(key)  # a superseder that is not kept supersedes nothing
                out.append(SetOutcome.REFUSED)
                continue
            if before is None:
                size = ctx.size or 1
                resident[key] = size
                self.used += size
                if to_dram:  # a new page goes straight to DRAM: one ledger event, not two
                    dram[key] = size
                    self.dram_used += size
                    ledger.placed_in_dram(key, size)
                else:
                    ledger.placed(key, size)
            elif to_dram:
                self._to_dram(key)
            if type_aware and ctx.obj_type in TRAILING_TYPES:
                superseded.stored(key, ctx.obj_type)
            if self.used > self.capacity or ledger.limited:
                self._make_room()
                if key not in resident:
                    out.append(SetOutcome.REFUSED)
                    continue
            if not to_dram:
                out.append(SetOutcome.NEW_SSD if before is None else SetOutcome.HELD)
            elif before is None:
                out.append(SetOutcome.NEW_DRAM)
            else:
                out.append(SetOutcome.UP if before == SSD else SetOutcome.HELD)
        return out

    def _set_new_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[SetOutcome] | None:
        """``set_batch`` of keys none of which is resident, in C-level passes, when nothing can
        happen between two keys: distinct keys, no tenant share to enforce, no trailing object
        to track, no payload-free size, and room for all of them, or a policy whose victims
        come in recency order (``EvictionPolicy.evicts_oldest_first``) and a batch no larger
        than the capacity: the victims made room for after the whole batch are then the ones
        made room for after each key (the oldest pages before the batch, in order; never a
        key of the batch). None (nothing done) otherwise: the caller then takes the per-key
        loop, which decides the same way."""
        resident = self._size
        if len(keys) < 2 or self.ledger.limited or resident.any_in(keys) or len(set(keys)) != len(keys):
            return None
        sizes = list(map(_CTX_SIZE, ctxs))
        if 0 in sizes:
            return None
        evicting = self.used + sum(sizes) > self.capacity
        interleaved = evicting and not (self.policy.evicts_oldest_first and sum(sizes) <= self.capacity)
        if interleaved and not self._plain:
            return None
        if self.type_aware and not TRAILING_TYPES.isdisjoint(map(_CTX_TYPE, ctxs)):
            return None
        if interleaved:
            return self._set_new_evicting(keys, ctxs, sizes)
        taken = self.policy.on_set_batch(keys, ctxs)
        if all(taken):
            kept_keys, kept_sizes = keys, sizes
        else:
            for key in itertools.compress(keys, map(operator.not_, taken)):
                self.superseded.gone(key)  # as the per-key loop does for a refusal
            kept_keys, kept_sizes = (
                list(itertools.compress(keys, taken)),
                list(itertools.compress(sizes, taken)),
            )
        total = sum(kept_sizes)
        if not resident.add_new(kept_keys, kept_sizes):  # checked above: new and distinct
            raise AssertionError("a batch checked new and distinct was refused")
        self.used += total
        to_dram = self.dram_capacity > 0
        if to_dram:
            self._dram.add_new(kept_keys, kept_sizes)
            self.dram_used += total
        self.ledger.placed_batch(kept_keys, kept_sizes, in_dram=to_dram)
        if evicting:
            self._make_room()
        outcome = (SetOutcome.REFUSED, SetOutcome.NEW_DRAM if to_dram else SetOutcome.NEW_SSD)
        return list(map(outcome.__getitem__, taken))

    def _set_new_evicting(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], sizes: list[int]
    ) -> list[SetOutcome]:
        """``_set_new_batch`` into a cache that must make room, for any policy: per key one
        ``on_set`` and, while over capacity, its victims (``_pop_plain``), as the per-key loop
        calls them; the ledger is told once, after the batch (its counts end the same, and the
        keys' tenants are named in the same order: the victims' tenants are named already)."""
        on_set, resident, dram = self.policy.on_set, self._size, self._dram
        to_dram = self.dram_capacity > 0
        new = SetOutcome.NEW_DRAM if to_dram else SetOutcome.NEW_SSD
        refused = SetOutcome.REFUSED
        # the keys enter the maps in one call each, ahead of the loop: a key not yet set is no
        # policy's victim, the DRAM order ends the same, and the refused ones leave again after
        resident.add_new(keys, sizes)
        if to_dram:
            dram.add_new(keys, sizes)
        gone: list[tuple[str, int, bool]] = []
        kept_keys: list[str] = []
        kept_sizes: list[int] = []
        refused_keys: list[str] = []
        out: list[SetOutcome] = []
        asked = 0  # keys the policy has answered for (the rest leave the maps if it raises)
        try:
            for key, ctx, size in zip(keys, ctxs, sizes, strict=True):
                taken = on_set(key, ctx)
                asked += 1
                if not taken:
                    refused_keys.append(key)  # nothing superseded to forget (``_plain``)
                    out.append(refused)
                    continue
                self.used += size
                if to_dram:
                    self.dram_used += size
                kept_keys.append(key)
                kept_sizes.append(size)
                if self.used > self.capacity:
                    self._pop_plain(gone)
                out.append(new if key in resident else refused)
        finally:
            for key in itertools.chain(refused_keys, keys[asked:]):
                resident.pop(key, None)
                dram.pop(key, None)
        self.ledger.placed_batch(kept_keys, kept_sizes, in_dram=to_dram)
        self._gone_plain(gone)
        return out

    @property
    def _plain(self) -> bool:
        """Only the policy picks victims and nothing beyond counts is kept per page (no tenant
        recency order, no superseded or trailing object tracked): ``_pop_plain`` may evict."""
        return not self.ledger.ordered and self.superseded.empty

    def _pop_plain(self, gone: list[tuple[str, int, bool]], target: int | None = None) -> None:
        """``_make_room``'s victims while ``_plain``, until ``used <= target`` (default: the
        capacity): taken out of the residents and of DRAM and added to ``gone`` as ``(key, size,
        was in DRAM)``; the caller tells the ledger and the drops (``_gone_plain``)."""
        pop_victim, resident, dram = self.policy.pop_victim, self._size, self._dram
        used, capacity = self.used, self.capacity if target is None else target
        dram_freed = 0
        while used > capacity:
            victim = pop_victim()
            if victim is None:
                break
            size = resident.pop(victim, 0)
            if not size:  # a policy returned a key it was never given: ignore it
                continue
            used -= size
            in_dram = dram.pop(victim, None)
            if in_dram is not None:
                dram_freed += in_dram
            gone.append((victim, size, in_dram is not None))
        self.used = used
        self.dram_used -= dram_freed

    def _gone_plain(self, gone: list[tuple[str, int, bool]]) -> None:
        if gone:
            keys, sizes, in_dram = zip(*gone, strict=True)
            self.ledger.gone_batch(keys, sizes, in_dram)
            self._drops.extend(zip(keys, map(_TIER_OF.__getitem__, in_dram), strict=True))

    def hit(self, key: str, ctx: AccessContext, promote: bool = True) -> str | None:
        """A read of ``key`` (one policy call); returns its tier before the read (None: unknown,
        nothing recorded). With ``promote`` an SSD page is placed in DRAM again."""
        tier = DRAM if key in self._dram else SSD if key in self._size else None
        if tier is None:
            return None
        self.policy.on_hit(key, ctx)
        if self.type_aware and key in self.superseded.trailing:
            self.superseded.used(key)
        if tier == DRAM:
            self._dram.move_to_end(key)
            if self.ledger.ordered:
                self.ledger.touched_dram(key)
        elif promote and self.dram_capacity > 0:
            self._to_dram(key)
        return tier

    def hit_in_dram_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> bool:
        """``hit`` of each key, in C-level passes, when every key is in DRAM and nothing else is
        kept per read (no tenant recency order, no trailing object tracked): the policy's calls
        and the DRAM order end as ``hit`` leaves them. False (nothing done) otherwise."""
        if self.ledger.ordered or (self.type_aware and self.superseded.trailing):
            return False
        if not self._dram.touch_many(keys):  # all or nothing: every key in DRAM, moved to MRU
            return False
        self.policy.on_hit_batch(keys, ctxs)
        return True

    def hit_batch(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], promote: Sequence[bool]
    ) -> list[str] | None:
        """``hit`` of each key (``promote[i]`` its ``promote``) with the policy told once
        (``on_hit_batch``), when the keys are distinct and all resident: the rest of ``hit`` (the
        DRAM order, promotions, trailing objects) touches no policy state, so the state ends as
        ``hit`` of each leaves it. Returns each key's tier before the read; None (nothing done)
        otherwise: the caller then takes ``hit`` per key."""
        dram, resident = self._dram, self._size
        if len(set(keys)) != len(keys) or not all(resident.contains_many(keys)):
            return None
        before = list(map(_TIER_OF.__getitem__, dram.contains_many(keys)))
        self.policy.on_hit_batch(keys, ctxs)
        trailing = self.superseded.trailing if self.type_aware else None
        ordered, up_allowed = self.ledger.ordered, self.dram_capacity > 0
        up_keys: list[str] = []  # promoted (without tenant orders: the ledger told after the loop)
        for key, tier, up in zip(keys, before, promote, strict=True):
            if trailing and key in trailing:
                self.superseded.used(key)
            if tier == DRAM:
                dram.move_to_end(key)
                if ordered:
                    self.ledger.touched_dram(key)
            elif up and up_allowed:
                if ordered:
                    self._to_dram(key)
                else:
                    dram[key] = resident[key]
                    up_keys.append(key)
        if up_keys:
            sizes = resident.values_of(up_keys)
            self.dram_used += sum(sizes)
            self.ledger.moved_batch(up_keys, sizes, to_dram=True)
        return before

    def adopt(self, key: str, ctx: AccessContext, tier: str) -> bool:
        """Make a page that ``tier`` holds (unknown so far) resident there; False if the policy
        refuses it or drops it at once (then the caller may drop the copy)."""
        if key in self._size:
            return self.hit(key, ctx, promote=tier == DRAM) is not None
        if self.capacity <= 0 or not self.policy.on_set(key, ctx):
            return False
        size = ctx.size or 1
        self._size[key] = size
        self.used += size
        self.ledger.placed(key, size)
        if self.type_aware:
            self.superseded.stored(key, ctx.obj_type)
        if tier == DRAM and self.dram_capacity > 0:
            self._to_dram(key)
        self._make_room()
        return key in self._size

    def supersede(self, keys: Iterable[str], by: str) -> None:
        """``by``, a trailing object about to be stored (``set`` next), is for a later page of the
        chain than ``keys`` (trailing objects of the same pool): the resident ones among them go
        first from now on (making room for ``by`` too), while ``by`` is resident. A no-op when not
        ``type_aware``."""
        if self.type_aware:
            self.superseded.supersede(keys, by)

    def miss(self, key: str, ctx: AccessContext) -> None:
        """An exists call stopped at ``key`` (policies with ghosts learn from it)."""
        self.policy.on_miss(key, ctx)

    def leave_dram(self, key: str) -> None:
        """The DRAM copy of a resident page is gone (or could not be made); it stays placed on
        SSD. Call ``remove`` instead when no other copy exists."""
        size = self._dram.pop(key, None)
        if size is not None:
            self.dram_used -= size
            self.ledger.to_ssd(key, size)

    def remove(self, key: str) -> None:
        """``key`` is gone from every local tier (forgotten by the policy too)."""
        self._forget(key)

    def settle(self) -> tuple[list[tuple[str, str]], list[str]]:
        """``(drops, demotions)`` since the last call (module docstring). A page dropped and set
        again since the last call is resident, so it is not among the drops."""
        demote: list[str] = self._demote_over_share()
        if self.dram_used > self.dram_capacity:
            demote.extend(self._demote_superseded(self.dram_used - self.dram_low))
            oldest, sizes = self._dram.pop_oldest(self.dram_used - self.dram_low)
            self.dram_used -= sum(sizes)
            self.ledger.moved_batch(oldest, sizes, to_dram=False)
            demote.extend(oldest)
        if demote and self.ledger.shares:  # demoted pages may put a tenant over its SSD share
            self._drop_over_share()
        drops = [d for d in self._drops if d[0] not in self._size] if self._drops else []
        self._drops = []
        if drops and demote:  # demoted, then dropped: its DRAM copy just goes
            gone = {key for key, _tier in drops}
            demote = [key for key in demote if key not in gone]
        return drops, demote

    def free_dram(self, nbytes: int, for_key: str | None = None) -> tuple[list[tuple[str, str]], list[str]]:
        """DRAM is physically full although the byte count has room (slab size classes, slots
        pinned by readers or held by demotions in flight): take at least ``nbytes`` out of DRAM
        now, for the set of ``for_key``. Its tenant's own DRAM pages go first when it has a share
        (``TenantLedger.own_dram_pages``); then, with an SSD (``dram_capacity < capacity``), the
        least recently used DRAM pages are demoted; without one the policy's victims are dropped.
        Returns ``(drops, demotions)`` like ``settle``."""
        own = (
            self.ledger.own_dram_pages(for_key, nbytes) if for_key is not None and self.ledger.shares else []
        )
        freed = 0
        if self.dram_capacity < self.capacity:
            demote = self._demote_superseded(nbytes)
            freed = sum(self._size[key] for key in demote)
            for key in own:
                if freed >= nbytes:
                    break
                size = self._dram.get(key)
                if size is not None:
                    self.leave_dram(key)
                    demote.append(key)
                    freed += size
            oldest, sizes = self._dram.pop_oldest(nbytes - freed)
            self.dram_used -= sum(sizes)
            self.ledger.moved_batch(oldest, sizes, to_dram=False)
            demote.extend(oldest)
            return self.settle()[0], demote
        for key in own:
            if freed >= nbytes:
                break
            size = self._forget(key) if key in self._dram else 0
            if size:
                self._drops.append((key, DRAM))
                freed += size
        if freed < nbytes and self._plain:  # the policy's victims in one pass (no SSD: all in DRAM)
            gone: list[tuple[str, int, bool]] = []
            self._pop_plain(gone, self.used - (nbytes - freed))
            self._gone_plain(gone)
            return self.settle()
        while freed < nbytes:
            victim = self._next_victim()
            if victim is None:
                break
            size = self._size.pop(victim, 0)
            if not size:  # a policy returned a key it was never given: ignore it
                continue
            self.used -= size
            self.leave_dram(victim)
            self.ledger.gone(victim, size)
            self.superseded.gone(victim)
            self._drops.append((victim, DRAM))
            freed += size
        return self.settle()

    def free_dram_room(
        self, plan: RoomPlan, slots: int, for_key: str | None = None
    ) -> tuple[list[tuple[str, str]], list[str], list[str]]:
        """``free_dram`` when DRAM's slabs, not its bytes, are what is short (``dram_room``):
        only pages that make room for ``slots`` slots of the set's class leave DRAM (demoted
        with an SSD, dropped without), chosen in the order ``free_dram`` takes them (superseded
        sidecars, the tenant's own pages when it has a share, then the least recently used);
        when none can make room, none leaves. Returns ``(drops, demotions, strays)``: strays are
        pages of an emptied slab that DRAM holds but the placement does not know (the caller
        removes them from DRAM)."""
        dram = self._dram
        first = [k for k in self.superseded.oldest() if k in dram]
        if for_key is not None and self.ledger.shares:
            first.extend(self.ledger.own_dram_pages(for_key, 1 << 62))
        order: Iterable[tuple[str, int]] = itertools.chain(
            ((k, dram[k]) for k in first if k in dram), dram.items()
        )
        hints = self.hints
        if hints is not None and hints.pinning:  # a pinned page never leaves to make room (Hints.pin)
            order = ((k, n) for k, n in order if not hints.pinned(k))
        chosen = choose(plan, order, slots)
        to_ssd = self.dram_capacity < self.capacity
        demote: list[str] = []
        strays: list[str] = []
        for key in chosen:
            if key not in dram:
                if key not in self._size:
                    strays.append(key)
                continue
            if to_ssd:
                self.leave_dram(key)
                demote.append(key)
            else:
                self._forget(key)
                self._drops.append((key, DRAM))
        return self.settle()[0], demote, strays

    def clear(self) -> None:
        self.policy.clear()
        self._size.clear()
        self._dram.clear()
        self.used = self.dram_used = 0
        self._drops.clear()
        self.ledger.clear()
        self.superseded.clear()

    # ------------------------------------------------------------------ internals
    def _to_dram(self, key: str) -> None:
        size = self._dram.get(key)
        if size is None:
            size = self._size[key]
            self._dram[key] = size
            self.dram_used += size
            self.ledger.to_dram(key, size)
        else:
            self._dram.move_to_end(key)
            self.ledger.touched_dram(key)

    def _make_room(self) -> None:
        self._drop_over_share()
        if self.used > self.capacity and self._plain:
            gone: list[tuple[str, int, bool]] = []
            self._pop_plain(gone)
            self._gone_plain(gone)
            return
        while self.used > self.capacity:
            victim = self._next_victim()
            if victim is None:
                break
            size = self._size.pop(victim, 0)
            if not size:  # a policy returned a key it was never given: ignore it
                continue
            self.used -= size
            tier = DRAM if victim in self._dram else SSD
            self.leave_dram(victim)
            self.ledger.gone(victim, size)
            self.superseded.gone(victim)
            self._drops.append((victim, tier))

    def _next_victim(self) -> str | None:
        """The longest superseded trailing object (taken from the policy too), else the policy's
        victim (already forgotten by the policy)."""
        stale = self.superseded.first()
        if stale is not None:
            self.superseded.gone(stale)
            self.policy.on_remove(stale)
            return stale
        return self.policy.pop_victim()

    def _demote_superseded(self, nbytes: int) -> list[str]:
        """Superseded DRAM objects taken out of DRAM (to move to SSD), up to ``nbytes``."""
        out: list[str] = []
        freed = 0
        for key in self.superseded.oldest():
            if freed >= nbytes:
                break
            if key in self._dram:
                freed += self._dram[key]
                self.leave_dram(key)
                out.append(key)
        return out

    # ------------------------------------------------------------------ tenants' shares (quotas.py)
    def _drop_over_share(self) -> None:
        """Before the policy is asked for victims: tenants over a share give up their own pages."""
        for key in self.ledger.over_share_drops(has_ssd=self.dram_capacity < self.capacity):
            tier = DRAM if key in self._dram else SSD
            if self._forget(key):
                self._drops.append((key, tier))

    def _forget(self, key: str) -> int:
        """Take resident ``key`` out of the placement, the policy included (the caller records
        the drop); its size, 0 if it was not resident."""
        size = self._size.pop(key, 0)
        if size:
            self.used -= size
            self.leave_dram(key)
            self.ledger.gone(key, size)
            self.superseded.gone(key)
            self.policy.on_remove(key)
        return size

    def _demote_over_share(self) -> list[str]:
        """DRAM pages of tenants over their DRAM share, taken out of DRAM (to move to SSD)."""
        if self.dram_capacity >= self.capacity:
            return []  # no SSD: over-share DRAM pages are dropped by _drop_over_share
        out = [key for key in self.ledger.over_share_demotions() if key in self._dram]
        for key in out:
            self.leave_dram(key)
        return out

    # ------------------------------------------------------------------ runtime changes (admin)
    def resize(self, capacity: int, dram_capacity: int, dram_low: int | None = None) -> None:
        """New capacities (a tier resized, attached or detached). Pages over the new capacity are
        dropped by the policy now (``settle`` reports them); DRAM over its new capacity is demoted
        at the next ``settle``."""
        low = dram_capacity if dram_low is None else dram_low
        if capacity < 0 or not 0 <= low <= dram_capacity <= capacity:
            raise ValueError(
                f"need 0 <= dram_low <= dram_capacity <= capacity, got {low}, {dram_capacity}, {capacity}"
            )
        self.capacity, self.dram_capacity, self.dram_low = capacity, dram_capacity, low
        self.ledger.set_capacity(capacity, dram_capacity)
        self._make_room()

    def resident_keys(self) -> list[str]:
        """Every resident key (a copy), oldest placement first."""
        return self._size.keys()

    def hottest_cut(self, limit: int) -> HottestCut:
        """What ``hottest`` needs, copied by C-level passes (a few ms at 256k pages: callers take it
        under the store lock and run ``HottestCut.pages`` after releasing it)."""
        dram = self._dram.newest(limit)
        # the first ``limit`` placed pages hold at most len(dram) DRAM ones: enough SSD ones follow
        placed = self._size.newest(limit)
        return HottestCut(dram, placed, limit)

    def hottest(self, limit: int) -> list[tuple[str, int, bool]]:
        """Up to ``limit`` resident pages, hottest first: DRAM (most recent first), then the pages
        placed on SSD (latest placed first). ``(key, size, in_dram)``."""
        return self.hottest_cut(limit).pages()

    def warm(self, key: str) -> bool:
        """A page placed on SSD was copied into DRAM by the re-warmer: place it in DRAM as the least
        recent page (unused since the restart), while DRAM stays within ``dram_capacity`` (so a
        re-warm never causes a demotion by itself)."""
        size = self._size.get(key)
        if size is None or key in self._dram or self.dram_used + size > self.dram_capacity:
            return False
        self._to_dram(key)
        self._dram.move_to_end(key, last=False)
        return True
