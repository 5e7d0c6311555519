"""The timing layer: per-tier latency histograms and outcome counters of every batched tier call.

``TierTiming.instrument(tier)`` wraps the tier object's three batched calls (``get_batch_into``,
``put_batch``, ``contains_batch``) *on that instance*: the object keeps its class, so the store's
``isinstance`` checks, the mover's pinned DRAM access and every other method are untouched, and
every caller (the store's reads and writes, the mover's demotions to SSD, the detach flush) is
measured. The single-key calls of the ``Tier`` contract (``put``, ``get_into``) go through the
batched ones and are measured too; ``contains`` (one key) is not.

Per tier (``tier`` label), with the registry's base labels (``model``, ``rank``):

- ``hicache_mooncake:tier_op_seconds{op=get|set|exists}``: wall time of one batched call;
- ``hicache_mooncake:tier_hits_total`` / ``tier_misses_total``: keys a get asked this tier for and
  found / did not find (a key found above is not asked here; a read that failed or ran past its
  deadline is a miss);
- ``hicache_mooncake:tier_read_bytes_total`` / ``tier_written_bytes_total``: payload bytes of the
  keys found / accepted by a set (a key already present is accepted without a write);
- ``hicache_mooncake:tier_write_failures_total``: keys a set did not store (no room, refused,
  I/O error, deadline); the causes are in ``tier_refusals_total`` where the tier counts them.

A series appears with its first non-zero value (no series that is always zero), and label values
are bounded (tier names and three ops). Cost per batched call on the data path: two clock reads,
one pass over the call's keys (at most 128) for its hits and bytes, and one queued update
(``metrics.deferred``): the histogram observation and the counter increments run when the
registry is read (or once 512 updates wait).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence
from itertools import compress
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from hicache_mooncake.metrics.deferred import DeferredUpdates
from hicache_mooncake.tiers.parts import pages_nbytes
from hicache_mooncake.tiers.tier import Tier

_ITEM_PARTS = operator.itemgetter(1)
_ITEM_CTX = operator.itemgetter(2)
_CTX_SIZE = operator.attrgetter("size")

PREFIX = "hicache_mooncake:"
LATENCY_BUCKETS = (
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""From a DRAM hit of a few pages (tens of microseconds) to a remote call at its deadline (seconds)."""
_MARK = "_hicache_timing"


class TierTiming:
    def __init__(
        self,
        registry: CollectorRegistry,
        base_labels: Mapping[str, str],
        deferred: DeferredUpdates | None = None,
    ) -> None:
        """``deferred``: where a call's updates are queued (``metrics.deferred``; it must be
        registered in ``registry`` before this); None: a queue of its own, registered here."""
        if deferred is None:
            deferred = DeferredUpdates()
            registry.register(deferred)
        self.deferred = deferred
        names = list(base_labels)
        self._base = tuple(base_labels.values())
        self.seconds = Histogram(
            f"{PREFIX}tier_op_seconds",
            "Wall time of one batched call to a tier (op: get, set, exists)",
            [*names, "tier", "op"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

        def per_tier(name: str, doc: str) -> Counter:
            return Counter(f"{PREFIX}{name}", doc, [*names, "tier"], registry=registry)

        self.hits = per_tier("tier_hits", "Keys a get found in this tier")
        self.misses = per_tier(
            "tier_misses", "Keys a get asked this tier for and did not find (or could not read in time)"
        )
        self.read_bytes = per_tier("tier_read_bytes", "Payload bytes read from this tier")
        self.written_bytes = per_tier("tier_written_bytes", "Payload bytes this tier accepted from sets")
        self.write_failures = per_tier(
            "tier_write_failures",
            "Keys a set did not store in this tier (see tier_refusals_total for causes)",
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _child(self, family: Counter | Histogram, *values: str) -> Any:
        key = (id(family), values)
        child = self._children.get(key)
        if child is None:
            child = self._children.setdefault(key, family.labels(*self._base, *values))
        return child

    def _count(self, family: Counter, tier: str, amount: float) -> None:
        if amount:
            self._child(family, tier).inc(amount)

    # ------------------------------------------------------------------ observations (queued)
    def _apply_exists(self, tier: str, seconds: float) -> None:
        self._child(self.seconds, tier, "exists").observe(seconds)

    def _apply_read(self, tier: str, seconds: float, hits: int, misses: int, nbytes: int) -> None:
        self._child(self.seconds, tier, "get").observe(seconds)
        self._count(self.hits, tier, hits)
        self._count(self.misses, tier, misses)
        self._count(self.read_bytes, tier, nbytes)

    def _apply_write(self, tier: str, seconds: float, failed: int, nbytes: int) -> None:
        self._child(self.seconds, tier, "set").observe(seconds)
        self._count(self.written_bytes, tier, nbytes)
        self._count(self.write_failures, tier, failed)

    # ------------------------------------------------------------------ the layer
    def instrument(self, tier: Tier) -> None:
        """Time ``tier``'s batched calls from now on (module docstring); a tier already
        instrumented is left as it is."""
        if vars(tier).get(_MARK) is not None:
            return
        name = tier.name
        get, put, contains = tier.get_batch_into, tier.put_batch, tier.contains_batch
        clock = time.perf_counter
        defer = self.deferred.add
        apply_read, apply_write, apply_exists = self._apply_read, self._apply_write, self._apply_exists

        def get_batch_into(
            items: Sequence[tuple[str, Any, Any]], deadline: float | None = None, *more: Any, **named: Any
        ) -> list[bool]:
            start = clock()
            result = get(items, deadline, *more, **named)
            seconds = clock() - start
            hits, nbytes = _payload(items, result)  # now: the items are the caller's, borrowed
            defer(apply_read, (name, seconds, hits, len(result) - hits, nbytes))
            return result

        def put_batch(
            items: Sequence[tuple[str, Any, Any]], deadline: float | None = None, *more: Any, **named: Any
        ) -> list[bool]:  # ``more``/``named``: what the tier's own put_batch takes beyond these (passed on)
            start = clock()
            result = put(items, deadline, *more, **named)
            seconds = clock() - start
            stored, nbytes = _payload(items, result)
            defer(apply_write, (name, seconds, len(result) - stored, nbytes))
            return result

        def contains_batch(keys: Sequence[str], *more: Any, **named: Any) -> list[bool]:
            start = clock()
            result = contains(keys, *more, **named)  # ``more``: the keys' fingerprints, where given
            defer(apply_exists, (name, clock() - start))
            return result

        setattr(tier, "get_batch_into", get_batch_into)  # noqa: B010 - instance attribute, on purpose
        setattr(tier, "put_batch", put_batch)  # noqa: B010
        setattr(tier, "contains_batch", contains_batch)  # noqa: B010
        setattr(tier, _MARK, self)


def _payload(items: Sequence[tuple[str, Any, Any]], result: Sequence[bool]) -> tuple[int, int]:
    """(keys done, their payload bytes): the sizes their contexts carry (the store's calls set
    them from the parts), the parts' own sizes where a context has none."""
    chosen = list(compress(items, result))
    sizes = list(map(_CTX_SIZE, map(_ITEM_CTX, chosen)))
    if 0 in sizes:
        return len(chosen), pages_nbytes(list(map(_ITEM_PARTS, chosen)))
    return len(chosen), sum(sizes)
