"""Chain-aware eviction: learned per-class hit density plus prefix-chain orphan eviction.

KV pages arrive as prefix chains: SGLang passes a request's pages in prefix order, and a page can
only ever be a hit if every page before it in its chain is a hit too. Two consequences drive this
policy:

1. **Orphans are worthless.** Once a page's parent (``prev_key``) has been evicted, the page cannot
   be hit before the parent is stored again, and when that happens the same request re-sends the
   page anyway. So the descendants of an evicted page are evicted first (``orphans=True``; turn it
   off for an upper tier whose evictions are demotions, not losses).
2. **Whether a page comes back is predictable from what the backend sees at insertion.** Each
   access puts the page in a *class* built from: how it arrived (new write, re-write, read hit,
   promotion, demotion), whether it is the last page of its call (the partial tail of a request is
   re-hashed on the next turn: it is almost never read again), its depth in the chain
   (``prefix_hits + position``, bucketed), how much of the request was already cached
   (``prefix_hits``: a first turn vs a continued conversation), whether its parent has been read
   before (chain history), and for hits how often the page itself was read.

For each class the policy learns online, from hits of resident pages and from ghost entries
(evicted keys, remembered with their class and last-access time), the distribution of the age
(in accesses to this policy) at which pages of the class are reused or are given up. From these it
computes the LHD *hit density* (Beckmann et al., NSDI'18): expected future hits divided by
expected remaining time in the cache, as a function of class and age. The victim is the page of
least hit density among the least recently used page of each class (and any orphan before that).
Statistics decay geometrically, so the policy follows a changing workload.

Invariants:
- Every resident key is in exactly one class queue (ordered by last access) and in ``_meta``;
  orphans are resident keys also listed in ``_orphans``.
- Ghost entries are never resident; the ghost list holds at most ``ghost_factor`` times the
  largest resident count seen (at least 1024 keys).
- With no statistics yet every class has the same density at a given age, so the policy starts
  as LRU (oldest head first).
- Deterministic: same calls, same victims. No method does I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, ClassVar

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy

# Arrival kinds.
_NEW, _REWRITE, _HIT, _PROMOTED, _DEMOTED = range(5)
_N_AGE_BINS = 2 * 48


def _age_bin(age: int) -> int:
    """Half-octave log bins: 0, 1, 2, 3, 4-5, 6-7, 8-11, 12-15, ..."""
    if age < 4:
        return age
    bl = age.bit_length()
    return min(_N_AGE_BINS - 1, 2 * bl - 2 + ((age >> (bl - 2)) & 1))


def _bin_floor(b: int) -> int:
    if b < 4:
        return b
    bl = (b + 2) // 2
    return (1 << (bl - 1)) | ((b & 1) << (bl - 2))


def _bucket(n: int, edges: tuple[int, ...]) -> int:
    for i, e in enumerate(edges):
        if n < e:
            return i
    return len(edges)


_DEPTH_EDGES = (1, 2, 4, 8, 16)  # 0 | 1 | 2-3 | 4-7 | 8-15 | 16+
_PH_EDGES = (1, 2, 4)  # 0 | 1 | 2-3 | 4+
_READS_EDGES = (2, 3)  # 1 | 2 | 3+


class _Meta:
    __slots__ = ("cls", "tick", "parent", "reads")

    def __init__(self, cls: int, tick: int, parent: str | None, reads: int) -> None:
        self.cls = cls
        self.tick = tick
        self.parent = parent
        self.reads = reads


@register_policy
class ChainPolicy(EvictionPolicy):
    """Chain-aware, learned hit-density eviction (see the module docstring)."""

    name = "chain"
    #: Options for a tier whose evictions are demotions to a lower tier (pages stay reachable).
    upper_tier_options: ClassVar[dict[str, Any]] = {"orphans": False, "learn": False}

    def __init__(
        self,
        ghost_factor: float = 1.0,
        decay: float = 0.9,
        refresh_every: int = 8192,
        prior_events: float = 32.0,
        orphans: bool = True,
        admit_min_density: float = 0.0,
        descend: bool = False,
        learn: bool = True,
    ) -> None:
        if ghost_factor < 0:
            raise ValueError(f"chain ghost_factor must be >= 0, got {ghost_factor}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"chain decay must be in (0, 1], got {decay}")
        if refresh_every < 1:
            raise ValueError(f"chain refresh_every must be >= 1, got {refresh_every}")
        self.ghost_factor = ghost_factor
        self.decay = decay
        self.refresh_every = refresh_every
        self.prior_events = prior_events
        self.orphans = orphans
        self.admit_min_density = admit_min_density
        self.descend = descend
        self.learn = learn
        self._tick = 0
        self._meta: dict[str, _Meta] = {}
        self._queues: dict[int, OrderedDict[str, None]] = {}
        self._children: dict[str, dict[str, None]] = {}
        self._orphans: OrderedDict[str, None] = OrderedDict()
        self._ghost: OrderedDict[str, _Meta] = OrderedDict()
        self._peak = 0
        # Per class: hits, events (hits + give-ups) and summed event ages, per age bin.
        self._hits: dict[int, list[float]] = {}
        self._events: dict[int, list[float]] = {}
        self._agesum: dict[int, list[float]] = {}
        self._density: dict[int, list[float]] = {}
        self._pooled: list[float] = [1.0 / (1 + _bin_floor(b)) for b in range(_N_AGE_BINS)]
        self._since_refresh = 0

    # ---- classification ----------------------------------------------------------------------
    def _classify(self, kind: int, ctx: AccessContext, reads: int) -> int:
        depth = ctx.prefix_hits + ctx.position if kind in (_NEW, _REWRITE, _DEMOTED) else ctx.position
        if kind in (_HIT, _PROMOTED):
            return (kind << 12) | (_bucket(reads, _READS_EDGES) << 4) | _bucket(depth, _DEPTH_EDGES)
        tail = 1 if ctx.position == ctx.batch_len - 1 else 0
        parent_read = 0
        if ctx.prev_key is not None:
            pm = self._meta.get(ctx.prev_key) or self._ghost.get(ctx.prev_key)
            parent_read = 2 if pm is None else (1 if pm.reads > 0 else 0)
        return (
            (kind << 12)
            | (tail << 10)
            | (parent_read << 8)
            | (_bucket(ctx.prefix_hits, _PH_EDGES) << 4)
            | _bucket(depth, _DEPTH_EDGES)
        )

    # ---- statistics --------------------------------------------------------------------------
    def _record(self, cls: int, age: int, hit: bool) -> None:
        hits = self._hits.get(cls)
        if hits is None:
            hits = self._hits[cls] = [0.0] * _N_AGE_BINS
            self._events[cls] = [0.0] * _N_AGE_BINS
            self._agesum[cls] = [0.0] * _N_AGE_BINS
        b = _age_bin(age)
        if hit:
            hits[b] += 1.0
        self._events[cls][b] += 1.0
        self._agesum[cls][b] += age

    def _refresh(self) -> None:
        self._since_refresh = 0
        pooled_h = [0.0] * _N_AGE_BINS
        pooled_e = [0.0] * _N_AGE_BINS
        pooled_s = [0.0] * _N_AGE_BINS
        for cls, hits in self._hits.items():
            ev, sm = self._events[cls], self._agesum[cls]
            for b in range(_N_AGE_BINS):
                pooled_h[b] += hits[b]
                pooled_e[b] += ev[b]
                pooled_s[b] += sm[b]
        total = sum(pooled_e)
        if total <= 0:
            return
        w = self.prior_events / total
        self._pooled = self._densities(pooled_h, pooled_e, pooled_s, 0.0, [], [], [])
        for cls, hits in self._hits.items():
            self._density[cls] = self._densities(
                hits, self._events[cls], self._agesum[cls], w, pooled_h, pooled_e, pooled_s
            )
        d = self.decay
        if d < 1.0:
            for cls, hits in self._hits.items():
                ev, sm = self._events[cls], self._agesum[cls]
                for b in range(_N_AGE_BINS):
                    hits[b] *= d
                    ev[b] *= d
                    sm[b] *= d

    @staticmethod
    def _densities(
        hits: list[float],
        events: list[float],
        agesum: list[float],
        w: float,
        ph: list[float],
        pe: list[float],
        ps: list[float],
    ) -> list[float]:
        out = [0.0] * _N_AGE_BINS
        h = e = s = 0.0
        for b in range(_N_AGE_BINS - 1, -1, -1):
            h += hits[b]
            e += events[b]
            s += agesum[b]
            if w:
                h += w * ph[b]
                e += w * pe[b]
                s += w * ps[b]
            life = s - _bin_floor(b) * e
            out[b] = h / life if life > 0 else (h if h > 0 else 0.0)
        return out

    def _density_of(self, cls: int, age: int) -> float:
        if not self.learn:
            return 0.0
        table = self._density.get(cls, self._pooled)
        return table[_age_bin(age)]

    # ---- bookkeeping -------------------------------------------------------------------------
    def _advance(self) -> int:
        self._tick += 1
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_every:
            self._refresh()
        return self._tick

    def _enqueue(self, key: str, meta: _Meta, parent: str | None) -> None:
        q = self._queues.get(meta.cls)
        if q is None:
            q = self._queues[meta.cls] = OrderedDict()
        q[key] = None
        if self.orphans and parent != meta.parent:
            if meta.parent is not None:
                sib = self._children.get(meta.parent)
                if sib is not None:
                    sib.pop(key, None)
            meta.parent = parent
            if parent is not None:
                self._children.setdefault(parent, {})[key] = None

    def _dequeue(self, key: str, meta: _Meta) -> None:
        q = self._queues[meta.cls]
        del q[key]
        if not q:
            del self._queues[meta.cls]
        self._orphans.pop(key, None)

    def _touch(self, key: str, meta: _Meta, kind: int, ctx: AccessContext) -> None:
        tick = self._advance()
        self._record(meta.cls, tick - meta.tick, True)
        self._dequeue(key, meta)
        meta.reads += 1
        meta.cls = self._classify(kind, ctx, meta.reads)
        meta.tick = tick
        self._enqueue(key, meta, ctx.prev_key)

    # ---- EvictionPolicy ----------------------------------------------------------------------
    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        meta = self._meta.get(key)
        if meta is not None:
            self._touch(key, meta, _REWRITE, ctx)
            return
        tick = self._advance()
        kind = _PROMOTED if ctx.promoted else (_DEMOTED if ctx.demoted else _NEW)
        ghost = self._ghost.pop(key, None)
        reads = 0
        if ghost is not None:
            # A key we gave up came back: for its old class that was a hit at this age.
            self._record(ghost.cls, tick - ghost.tick, True)
            reads = ghost.reads + 1
            if kind == _NEW:
                kind = _REWRITE
        meta = _Meta(self._classify(kind, ctx, reads), tick, None, reads)
        self._meta[key] = meta
        self._enqueue(key, meta, ctx.prev_key)
        if len(self._meta) > self._peak:
            self._peak = len(self._meta)

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        meta = self._meta.get(key)
        if meta is not None:
            self._touch(key, meta, _HIT, ctx)

    def on_remove(self, key: str) -> None:
        meta = self._meta.pop(key, None)
        if meta is None:
            return
        self._dequeue(key, meta)
        self._forget_links(key, meta)

    def _forget_links(self, key: str, meta: _Meta) -> None:
        if meta.parent is not None:
            sib = self._children.get(meta.parent)
            if sib is not None:
                sib.pop(key, None)
                if not sib:
                    del self._children[meta.parent]

    def pop_victim(self) -> str | None:
        if not self._meta:
            return None
        if self._orphans:
            key, _ = self._orphans.popitem(last=False)
        else:
            key = self._leaf_below(self._choose())
        meta = self._meta.pop(key)
        self._dequeue(key, meta)
        self._forget_links(key, meta)
        if self.orphans:
            self._orphan_descendants(key)
        self._remember(key, meta)
        return key

    def _choose(self) -> str:
        tick = self._tick
        best_key = ""
        best = (float("inf"), 0)
        for cls, q in self._queues.items():
            key = next(iter(q))
            age = tick - self._meta[key].tick
            score = (self._density_of(cls, age), -age)
            if score < best:
                best, best_key = score, key
        return best_key

    def _leaf_below(self, key: str) -> str:
        """The deepest resident descendant of ``key`` (following the newest child).

        Evicting a chain from its end keeps its prefix useful; evicting its head would leave
        every descendant unreachable.
        """
        if not self.descend:
            return key
        seen = 0
        while seen < 4096:
            kids = self._children.get(key)
            if not kids:
                return key
            if len(kids) > 1:
                return key
            key = next(iter(kids))
            seen += 1
        return key

    def _orphan_descendants(self, key: str) -> None:
        stack = [key]
        while stack:
            kids = self._children.pop(stack.pop(), None)
            if not kids:
                continue
            for kid in kids:
                if kid in self._meta and kid not in self._orphans:
                    self._orphans[kid] = None
                    stack.append(kid)

    def _remember(self, key: str, meta: _Meta) -> None:
        if self.ghost_factor <= 0:
            self._record(meta.cls, self._tick - meta.tick, False)
            return
        self._ghost[key] = meta
        limit = max(1024, int(self.ghost_factor * self._peak))
        while len(self._ghost) > limit:
            _, old = self._ghost.popitem(last=False)
            self._record(old.cls, self._tick - old.tick, False)

    def should_admit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        if self.admit_min_density <= 0:
            return True
        kind = _PROMOTED if ctx.promoted else (_DEMOTED if ctx.demoted else _NEW)
        cls = self._classify(kind, ctx, 0)
        return self._density_of(cls, 0) >= self.admit_min_density

    def __len__(self) -> int:
        return len(self._meta)

    def __contains__(self, key: object) -> bool:
        return key in self._meta

    def clear(self) -> None:
        self._meta.clear()
        self._queues.clear()
        self._children.clear()
        self._orphans.clear()
        self._ghost.clear()
