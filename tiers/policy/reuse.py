"""Reuse-predicting, chain-aware eviction with an LRU guard (the project's default policy).

A KV page is worth keeping only if it will be read again, and on prefix-sharing workloads that is
mostly decided by *what kind of page it is* (the partial tail of a request is re-hashed next
turn and is almost never read again; a page that was already read, or that came back after an
eviction, is read again far more often than a page written for the first time; very long
requests are continued less often). This policy learns that online and spends cache time where
it pays, but falls back to LRU whenever LRU would have done better.

1. **Classes.** Each access puts the page in a class built only from what the backend sees: how
   it arrived (first write / re-write of a key seen within the horizon / read hit), whether it is
   the last page of a set call (the request's tail), the request's length in pages
   (``prefix_hits + batch_len`` for a set, bucketed) and how much of the request was already
   cached (``prefix_hits``, bucketed).
2. **Unbiased reuse estimate per class.** Every access opens an *observation* of its key; the
   observation is a success when the key is accessed again within ``horizon`` x (largest resident
   count seen) accesses, a failure otherwise. Observations run whether or not the page is still
   resident (a bounded ghost of keys, at most horizon x resident), so a class that is evicted
   early is judged over the same horizon as one that stays: the estimate does not feed on its
   own decisions. ``p(class)`` is the smoothed success ratio; counts decay geometrically.
3. **Eviction: GreedyDual over predicted reuse.** A page's priority is ``L + p(class)**alpha``,
   where ``L`` is the priority of the last victim (it rises with time); the lowest priority goes.
   ``alpha = 0`` is exactly LRU; ``alpha = 1`` keeps each page for a time proportional to its
   chance of reuse. Pages whose chain parent was evicted are *orphans*: a prefix hit can never
   reach them before the parent is written again (and the same request re-writes them), so they
   go first.
4. **The guard.** Two shadow caches of key sets (same size as this one, same classes) run with
   ``alpha = 0`` (LRU) and ``alpha = 1`` and count the prefix hits each would have had (a request
   starts at an access of depth 0). Every ``adapt_every`` accesses the real cache takes the alpha
   of the shadow with more (decayed) hits, so it tracks the better of LRU and the predictor on
   the current workload: on a workload where prediction does not pay it behaves as LRU.

Invariants:
- ``pop_victim`` returns a resident key and forgets it; ``len`` counts resident keys only.
- Observations (the ghost) hold at most ``horizon * peak + 1024`` keys; shadows hold at most
  ``peak`` keys each (``peak``: the largest resident count seen).
- Deterministic (same calls, same victims); no I/O; not thread-safe (callers lock).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import ClassVar

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy

_NEW, _REWRITE, _HIT = range(3)
_LEN_EDGES = (4, 8, 16, 32, 64, 128)
_PH_EDGES = (1, 2, 4, 16)
_NEW_EDGES = (1, 3, 9, 33)
_ORPHAN = -1.0e18
_DEPTH_MAX = (1 << 24) - 1


def _bucket(n: int, edges: tuple[int, ...]) -> int:
    for i, e in enumerate(edges):
        if n < e:
            return i
    return len(edges)


class _Heap:
    """Keys with a GreedyDual priority; lazy deletion by sequence number.

    Chain-monotone: a key pushed right after its chain parent (``prev`` is the last key pushed)
    gets at most the parent's priority, and ties go deepest-first inside a request, oldest request
    first; so a chain is always cut from its end (its head keeps the hits of the rest).
    """

    __slots__ = ("heap", "entry", "floor", "chain", "_seq", "_last_key", "_last_prio")

    def __init__(self, chain: bool = True) -> None:
        self.heap: list[tuple[float, int, int, str]] = []
        self.entry: dict[str, int] = {}
        self.floor = 0.0  # L: the priority of the last victim
        self.chain = chain
        self._seq = itertools.count()
        self._last_key: str | None = None
        self._last_prio = 0.0

    def push(self, key: str, value: float, prev: str | None = None, order: int = 0) -> None:
        prio = self.floor + value
        if self.chain and prev is not None and prev == self._last_key and prio > self._last_prio:
            prio = self._last_prio
        self._last_key, self._last_prio = key, prio
        self._push(key, prio, order)

    def push_orphan(self, key: str) -> None:
        self._push(key, _ORPHAN, 0)

    def _push(self, key: str, prio: float, order: int) -> None:
        seq = next(self._seq)
        self.entry[key] = seq
        heapq.heappush(self.heap, (prio, order, seq, key))
        if len(self.heap) > 4 * len(self.entry) + 1024:
            self.heap = [e for e in self.heap if self.entry.get(e[3]) == e[2]]
            heapq.heapify(self.heap)

    def pop(self) -> str | None:
        heap, entry = self.heap, self.entry
        while heap:
            prio, _, seq, key = heapq.heappop(heap)
            if entry.get(key) == seq:
                del entry[key]
                if prio > self.floor:
                    self.floor = prio
                return key
        return None

    def remove(self, key: str) -> None:
        self.entry.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self.entry

    def __len__(self) -> int:
        return len(self.entry)


class _Shadow:
    """A key-only cache run at one alpha, counting the prefix hits it would have had."""

    __slots__ = ("alpha", "keys", "hits", "broken")

    def __init__(self, alpha: float, chain: bool = True) -> None:
        self.alpha = alpha
        self.keys = _Heap(chain)
        self.hits = 0.0
        self.broken = False

    def access(self, key: str, depth: int, p: float, capacity: int, prev: str | None, order: int) -> None:
        if depth == 0:
            self.broken = False
        if not self.broken:
            if key in self.keys:
                self.hits += 1.0
            else:
                self.broken = True
        self.keys.push(key, p**self.alpha if self.alpha else 1.0, prev, order)
        while len(self.keys) > capacity:
            self.keys.pop()


@register_policy
class ReusePolicy(EvictionPolicy):
    """Learned reuse probability per class + GreedyDual + orphans + LRU guard (module docstring)."""

    name = "reuse"
    #: One instance should own the whole capacity (``TierPlacement``); per-tier use is allowed.
    upper_tier_options: ClassVar[dict[str, object]] = {}

    def __init__(
        self,
        horizon: float = 4.0,
        alpha: float = 1.0,
        decay: float = 0.9,
        decay_every: int = 0,
        prior: float = 5.0,
        orphans: bool = True,
        guard: bool = True,
        adapt_every: int = 2048,
        adapt_decay: float = 0.9,
        margin: float = 0.002,
        features: int = 1,
        chain_order: bool = True,
        warm_frac: float = 0.0,
        prefer_pred: bool = False,
    ) -> None:
        if horizon <= 0:
            raise ValueError(f"reuse horizon must be > 0, got {horizon}")
        if alpha < 0:
            raise ValueError(f"reuse alpha must be >= 0, got {alpha}")
        if not 0.0 < decay <= 1.0 or not 0.0 < adapt_decay <= 1.0:
            raise ValueError("reuse decay and adapt_decay must be in (0, 1]")
        self.horizon = horizon
        self.decay = decay
        self.decay_every = decay_every
        self.prior = prior
        self.orphans = orphans
        self.guard = guard
        self.adapt_every = max(1, adapt_every)
        self.adapt_decay = adapt_decay
        self.alpha = 0.0 if guard else alpha
        self.margin = margin
        self.features = features
        self.warm_frac = warm_frac
        self.prefer_pred = prefer_pred
        if guard and prefer_pred:
            self.alpha = alpha
        self._alphas = (0.0, alpha)
        self.chain_order = chain_order
        self._epoch = 0
        self._res = _Heap(chain_order)
        self._parent: dict[str, str] = {}
        self._kids: dict[str, set[str]] = {}
        # Observations: key -> (tick, class); FIFO of (tick, key) to close them.
        self._obs: dict[str, tuple[int, int]] = {}
        self._obs_q: deque[tuple[int, str]] = deque()
        self._pos: dict[int, float] = {}
        self._tot: dict[int, float] = {}
        self._p: dict[int, float] = {}
        self._base = 0.5
        self._tick = 0
        self._peak = 0
        self._shadows = [_Shadow(a, self.chain_order) for a in self._alphas] if guard else []

    # ---- prediction --------------------------------------------------------------------------
    def _classify(self, kind: int, ctx: AccessContext) -> int:
        if kind == _HIT:
            ph = ctx.batch_len
            length = ctx.request_len if ctx.request_len > ph else ph
            tail = 0
        else:
            ph = ctx.prefix_hits
            length = ctx.prefix_hits + ctx.batch_len
            tail = 1 if ctx.position == ctx.batch_len - 1 else 0
        if self.features == 0:
            if kind == _HIT:
                length, ph = ctx.batch_len, ctx.batch_len
            return (kind << 8) | (tail << 7) | (_bucket(length, _LEN_EDGES) << 3) | _bucket(ph, _PH_EDGES)
        if self.features == 1:
            return (kind << 8) | (tail << 7) | (_bucket(length, _LEN_EDGES) << 3) | _bucket(ph, _PH_EDGES)
        new = length - ph
        return (kind << 8) | (tail << 7) | (_bucket(new, _NEW_EDGES) << 3) | _bucket(ph, _PH_EDGES)

    def predicted(self, cls: int) -> float:
        """The learned chance that a page of ``cls`` is accessed again within the horizon."""
        p = self._p.get(cls)
        return self._base if p is None else p

    def _observe(self, key: str, cls: int) -> None:
        self._tick += 1
        tick = self._tick
        old = self._obs.get(key)
        if old is not None:
            self._pos[old[1]] = self._pos.get(old[1], 0.0) + 1.0
            self._tot[old[1]] = self._tot.get(old[1], 0.0) + 1.0
        self._obs[key] = (tick, cls)
        q = self._obs_q
        q.append((tick, key))
        span = int(self.horizon * max(self._peak, 1)) + 1024
        if self.warm_frac > 0:
            span = min(span, max(1024, int(tick * self.warm_frac)))
        limit = tick - span
        while q and q[0][0] < limit:
            t, k = q.popleft()
            o = self._obs.get(k)
            if o is not None and o[0] == t:
                del self._obs[k]
                self._tot[o[1]] = self._tot.get(o[1], 0.0) + 1.0
        every = self.decay_every or max(1024, self._peak)
        if tick % every == 0:
            self._refresh()

    def _refresh(self) -> None:
        tot = sum(self._tot.values())
        if tot > 0:
            self._base = sum(self._pos.values()) / tot
        w = self.prior
        self._p = {c: (self._pos.get(c, 0.0) + w * self._base) / (n + w) for c, n in self._tot.items()}
        d = self.decay
        if d < 1.0:
            for c in self._tot:
                self._tot[c] *= d
            for c in self._pos:
                self._pos[c] *= d

    # ---- the guard ---------------------------------------------------------------------------
    def _shadow_access(self, key: str, depth: int, p: float, prev: str | None, order: int) -> None:
        cap = max(self._peak, 1)
        for s in self._shadows:
            s.access(key, depth, p, cap, prev, order)
        if self._tick % self.adapt_every == 0:
            lru, pred = self._shadows
            if lru.hits + pred.hits > 0:
                # Ties go to LRU: the predictor must win by a margin (noise must not move us off
                # the safe choice).
                if self.prefer_pred:
                    self.alpha = lru.alpha if lru.hits > pred.hits * (1.0 + self.margin) else pred.alpha
                else:
                    self.alpha = pred.alpha if pred.hits > lru.hits * (1.0 + self.margin) else lru.alpha
            for s in self._shadows:
                s.hits *= self.adapt_decay

    # ---- chain links -------------------------------------------------------------------------
    def _link(self, key: str, parent: str | None) -> None:
        if not self.orphans:
            return
        old = self._parent.get(key)
        if old == parent:
            return
        if old is not None:
            sib = self._kids.get(old)
            if sib is not None:
                sib.discard(key)
                if not sib:
                    del self._kids[old]
        if parent is None or parent == key:
            self._parent.pop(key, None)
        else:
            self._parent[key] = parent
            self._kids.setdefault(parent, set()).add(key)

    def _unlink(self, key: str) -> None:
        if not self.orphans:
            return
        self._link(key, None)
        kids = self._kids.pop(key, None)
        if not kids:
            return
        stack = list(kids)
        while stack:
            kid = stack.pop()
            self._parent.pop(kid, None)
            if kid in self._res:
                self._res.push_orphan(kid)
                more = self._kids.pop(kid, None)
                if more:
                    stack.extend(more)

    # ---- EvictionPolicy ----------------------------------------------------------------------
    def _access(self, key: str, kind: int, ctx: AccessContext) -> None:
        cls = self._classify(kind, ctx)
        self._observe(key, cls)
        p = self.predicted(cls)
        depth = ctx.position if kind == _HIT else ctx.prefix_hits + ctx.position
        if depth == 0:
            self._epoch += 1
        order = (self._epoch << 24) + (_DEPTH_MAX - min(depth, _DEPTH_MAX))
        prev = ctx.prev_key
        if self._shadows:
            self._shadow_access(key, depth, p, prev, order)
        self._res.push(key, p**self.alpha if self.alpha else 1.0, prev, order)
        self._link(key, ctx.prev_key)
        if len(self._res) > self._peak:
            self._peak = len(self._res)

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._res:
            kind = _HIT
        elif key in self._obs:
            kind = _REWRITE
        else:
            kind = _NEW
        if ctx.promoted:
            kind = _HIT
        self._access(key, kind, ctx)

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._res:
            self._access(key, _HIT, ctx)

    def on_remove(self, key: str) -> None:
        if key in self._res:
            self._res.remove(key)
            self._unlink(key)

    def pop_victim(self) -> str | None:
        key = self._res.pop()
        if key is not None:
            self._unlink(key)
        return key

    def __len__(self) -> int:
        return len(self._res)

    def __contains__(self, key: object) -> bool:
        return key in self._res

    def clear(self) -> None:
        self._res = _Heap(self.chain_order)
        self._parent.clear()
        self._kids.clear()
        self._obs.clear()
        self._obs_q.clear()
        self._shadows = [_Shadow(a, self.chain_order) for a in self._alphas] if self.guard else []
