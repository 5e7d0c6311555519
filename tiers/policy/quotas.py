"""Tenants in the placement: per-tenant bytes per tier, and capacity shares enforced for every
policy (``TenantLedger``).

A tenant is named by its keys: ``tenant_of(key)`` (the key format's business, see
``hicache_mooncake.keys``; ``""`` is the default tenant). The placement tells the ledger where each
resident page is (``placed`` / ``to_dram`` / ``to_ssd`` / ``gone``), so the ledger knows every
tenant's bytes in DRAM and on SSD (the per-tenant figures of ``stats``).

A tenant with a share (``TenantShare``: a fraction of the DRAM capacity and of the SSD part of the
placement's capacity) may not hold more than that. The placement asks the ledger before it asks its
policy for victims: a tenant over its SSD share gives up its own least recently demoted SSD pages
(``over_share_drops``), a tenant over its DRAM share its own least recently used DRAM pages
(``over_share_demotions``: moved to SSD, or dropped when there is no SSD). Pages of other tenants are
never taken for it, whatever the policy: a tenant over its share evicts its own pages first; and
when DRAM is physically full (its slots held by copies still in flight), a set of a tenant with a
share makes room from that tenant's own DRAM pages before anyone else's (``own_dram_pages``). Within
a tenant the order is recency, not the policy's (policies cannot choose a victim within a subset).
Shares are enforced when the placement settles a call (as DRAM's own capacity is): while calls are
in flight a tenant may exceed its share by their pages.

Bounds: tenants with a share are listed in the configuration; the others are only counted, and at
most ``max_tenants`` distinct names are counted (further ones add to ``OTHER``). Not thread-safe
(the placement's caller holds the store's lock); no I/O.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

OTHER = "(other)"
"""Where the pages of tenants beyond ``max_tenants`` are counted."""


def default_tenant(_key: str) -> str:
    return ""


@dataclass(frozen=True)
class TenantShare:
    """Fractions (0..1] of each tier one tenant may hold; 1.0 means no limit on that tier."""

    dram: float = 1.0
    ssd: float = 1.0

    def __post_init__(self) -> None:
        for name in ("dram", "ssd"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"a tenant's {name} share must be in (0, 1], got {value}")


class TenantLedger:
    """Per-tenant bytes in DRAM and on SSD, and the shares (module docstring)."""

    def __init__(
        self,
        tenant_of: Callable[[str], str] = default_tenant,
        shares: Mapping[str, TenantShare] | None = None,
        max_tenants: int = 256,
    ) -> None:
        self.tenant_of = tenant_of
        self._tenants_of: Callable[[Sequence[str]], list[str]] | None = getattr(tenant_of, "many", None)
        self.shares = dict(shares or {})
        self.max_tenants = max(max_tenants, len(self.shares) + 1)
        self.dram_used: Counter[str] = Counter()
        self.ssd_used: Counter[str] = Counter()
        self.evicted: Counter[str] = Counter()  # pages dropped for being over the share
        self.demoted: Counter[str] = Counter()  # pages moved DRAM -> SSD for being over the share
        self._known: set[str] = set(self.shares)
        self._dram_order: dict[str, OrderedDict[str, int]] = {t: OrderedDict() for t in self.shares}
        self._ssd_order: dict[str, OrderedDict[str, int]] = {t: OrderedDict() for t in self.shares}
        self._dram_limit: dict[str, int] = {}
        self._ssd_limit: dict[str, int] = {}
        self.limited = False
        """Some tenant has a share below 1 (``over_share_*`` may return pages); the placement
        skips asking them per key while this is False."""
        self.ordered = bool(self.shares)
        """Per-tenant recency orders are kept (some tenant has a share): ``touched_dram`` is a
        no-op while this is False."""

    # ------------------------------------------------------------------ limits
    def set_capacity(self, capacity: int, dram_capacity: int) -> None:
        """The placement's capacities changed (created, resized, a tier attached/detached)."""
        ssd = max(capacity - dram_capacity, 0)
        self._dram_limit = {t: int(s.dram * dram_capacity) for t, s in self.shares.items() if s.dram < 1.0}
        self._ssd_limit = {t: int(s.ssd * ssd) for t, s in self.shares.items() if s.ssd < 1.0}
        self.limited = bool(self._dram_limit or self._ssd_limit)

    # ------------------------------------------------------------------ events (the placement)
    def _name(self, key: str) -> str:
        return self._counted(self.tenant_of(key))

    def _names(self, keys: Sequence[str]) -> list[str]:
        """``_name`` of each key, in order: in C-level passes where ``tenant_of`` names a batch
        (``many``, as ``keys.TenantReader`` does) and the batch has one tenant (the usual call)."""
        many = self._tenants_of
        tenants = many(keys) if many is not None else list(map(self.tenant_of, keys))
        if tenants and tenants.count(tenants[0]) == len(tenants):
            return [self._counted(tenants[0])] * len(tenants)
        return list(map(self._counted, tenants))

    def _counted(self, tenant: str) -> str:
        """The name ``tenant`` is counted under: itself, or ``OTHER`` past ``max_tenants``."""
        if tenant in self._known:
            return tenant
        if len(self._known) < self.max_tenants:
            self._known.add(tenant)
            return tenant
        return OTHER

    def _bytes_by_tenant(self, keys: Sequence[str], sizes: Sequence[int]) -> Iterable[tuple[str, int]]:
        """``(tenant, bytes)`` of a batch, the keys' tenants named in order (``_names``): one pair
        when the batch has one tenant (the usual call), else one per key."""
        tenants = self._names(keys)
        if tenants and tenants.count(tenants[0]) == len(tenants):
            return ((tenants[0], sum(sizes)),)
        return zip(tenants, sizes, strict=True)

    def placed(self, key: str, size: int) -> None:
        """``key`` became resident; it counts as SSD until ``to_dram``."""
        tenant = self._name(key)
        self.ssd_used[tenant] += size
        order = self._ssd_order.get(tenant)
        if order is not None:
            order[key] = size

    def placed_in_dram(self, key: str, size: int) -> None:
        """``placed`` then ``to_dram`` in one step (a new page that goes straight to DRAM)."""
        tenant = self._name(key)
        if tenant not in self.ssd_used:
            self.ssd_used[tenant] = 0  # as placed + to_dram leave it
        self.dram_used[tenant] += size
        order = self._dram_order.get(tenant)
        if order is not None:
            order[key] = size

    def placed_batch(self, keys: Sequence[str], sizes: Sequence[int], in_dram: bool) -> None:
        """``placed_in_dram`` (``in_dram``) or ``placed`` of each key in order, in one pass when
        no tenant has a share (no recency orders to keep): the same counts, the keys' tenants
        named in the same order."""
        if self.ordered:
            one = self.placed_in_dram if in_dram else self.placed
            for key, size in zip(keys, sizes, strict=True):
                one(key, size)
            return
        counts = self.dram_used if in_dram else self.ssd_used
        for tenant, size in self._bytes_by_tenant(keys, sizes):
            if in_dram and tenant not in self.ssd_used:
                self.ssd_used[tenant] = 0  # as placed + to_dram leave it
            counts[tenant] += size

    def gone_batch(self, keys: Sequence[str], sizes: Sequence[int], in_dram: Sequence[bool]) -> None:
        """``to_ssd`` (where ``in_dram``) then ``gone`` of each key, in order: the same counts, the
        keys' tenants named in the same order; one step per tenant when no tenant has a share."""
        if self.ordered:
            for key, size, dram in zip(keys, sizes, in_dram, strict=True):
                if dram:
                    self.to_ssd(key, size)
                self.gone(key, size)
            return
        tenants = self._names(keys)
        if not tenants:
            return
        if tenants.count(tenants[0]) == len(tenants):  # one tenant: the usual call
            from_dram = sum(itertools.compress(sizes, in_dram))
            groups: Iterable[tuple[str, int, int]] = ((tenants[0], from_dram, sum(sizes) - from_dram),)
        else:
            groups = (
                (t, s if d else 0, 0 if d else s) for t, s, d in zip(tenants, sizes, in_dram, strict=True)
            )
        dram_used, ssd_used = self.dram_used, self.ssd_used
        for tenant, from_dram, from_ssd in groups:
            if from_dram:
                dram_used[tenant] -= from_dram
            ssd_used[tenant] -= from_ssd

    def moved_batch(self, keys: Sequence[str], sizes: Sequence[int], to_dram: bool) -> None:
        """``to_dram`` (``to_dram``) or ``to_ssd`` of each key, in order: the same counts, the
        keys' tenants named in the same order; one step per tenant when no tenant has a share (no
        recency orders to keep)."""
        if self.ordered:
            one = self.to_dram if to_dram else self.to_ssd
            for key, size in zip(keys, sizes, strict=True):
                one(key, size)
            return
        into, out_of = (self.dram_used, self.ssd_used) if to_dram else (self.ssd_used, self.dram_used)
        for tenant, size in self._bytes_by_tenant(keys, sizes):
            out_of[tenant] -= size
            into[tenant] += size

    def to_dram(self, key: str, size: int) -> None:
        """A resident page entered DRAM."""
        tenant = self._name(key)
        self.ssd_used[tenant] -= size
        self.dram_used[tenant] += size
        order = self._ssd_order.get(tenant)
        if order is not None:
            order.pop(key, None)
            self._dram_order[tenant][key] = size

    def touched_dram(self, key: str) -> None:
        """A DRAM page was used again (most recent now)."""
        order = self._dram_order.get(self._name(key)) if self._dram_order else None
        if order is not None and key in order:
            order.move_to_end(key)

    def to_ssd(self, key: str, size: int) -> None:
        """A resident page left DRAM (it stays placed on SSD until ``gone``)."""
        tenant = self._name(key)
        self.dram_used[tenant] -= size
        self.ssd_used[tenant] += size
        order = self._dram_order.get(tenant)
        if order is not None:
            order.pop(key, None)
            self._ssd_order[tenant][key] = size

    def gone(self, key: str, size: int) -> None:
        """A page placed on SSD (or just taken out of DRAM) is no longer resident."""
        tenant = self._name(key)
        self.ssd_used[tenant] -= size
        order = self._ssd_order.get(tenant)
        if order is not None:
            order.pop(key, None)

    def clear(self) -> None:
        self.dram_used.clear()
        self.ssd_used.clear()
        for order in (*self._dram_order.values(), *self._ssd_order.values()):
            order.clear()

    # ------------------------------------------------------------------ enforcement
    def over_share_drops(self, has_ssd: bool) -> list[str]:
        """Pages to drop now: the oldest SSD pages of tenants over their SSD share, and (without an
        SSD) the least recently used DRAM pages of tenants over their DRAM share."""
        out: list[str] = []
        if not self._ssd_limit and (has_ssd or not self._dram_limit):
            return out  # no share limits (the default): nothing to check, on every placement
        for tenant, limit in self._ssd_limit.items():
            out.extend(
                self._oldest(self._ssd_order[tenant], self.ssd_used[tenant] - limit, tenant, self.evicted)
            )
        if not has_ssd:
            for tenant, limit in self._dram_limit.items():
                over = self.dram_used[tenant] - limit
                out.extend(self._oldest(self._dram_order[tenant], over, tenant, self.evicted))
        return out

    def over_share_demotions(self) -> list[str]:
        """DRAM pages to move to SSD now: the least recently used of tenants over their DRAM share."""
        out: list[str] = []
        for tenant, limit in self._dram_limit.items():
            over = self.dram_used[tenant] - limit
            out.extend(self._oldest(self._dram_order[tenant], over, tenant, self.demoted))
        return out

    def own_dram_pages(self, key: str, nbytes: int) -> list[str]:
        """The least recently used DRAM pages of ``key``'s tenant, at least ``nbytes`` of them
        (all it has, when fewer), if that tenant has a share; else none. What a DRAM that is
        physically full (slots held by copies in flight) gives up first for a set of that tenant,
        so that another tenant's pages are taken only once its own are out."""
        order = self._dram_order.get(self.tenant_of(key))
        out: list[str] = []
        freed = 0
        for page, size in (order or {}).items():
            if freed >= nbytes:
                break
            out.append(page)
            freed += size
        return out

    @staticmethod
    def _oldest(order: OrderedDict[str, int], excess: int, tenant: str, counter: Counter[str]) -> list[str]:
        out: list[str] = []
        for key, size in order.items():
            if excess <= 0:
                break
            out.append(key)
            excess -= size
        counter[tenant] += len(out)
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        tenants = set(self.dram_used) | set(self.ssd_used) | set(self.shares)
        return {
            t: {
                "dram_bytes": self.dram_used[t],
                "ssd_bytes": self.ssd_used[t],
                "dram_limit_bytes": self._dram_limit.get(t, -1),
                "ssd_limit_bytes": self._ssd_limit.get(t, -1),
                "over_share_evicted": self.evicted[t],
                "over_share_demoted": self.demoted[t],
            }
            for t in sorted(tenants)
        }
