"""Reuse-predicting, chain-aware eviction with a statistical LRU guard (the default policy).

A KV page is worth keeping only if it will be read again, and on prefix-sharing workloads that is
mostly decided by *what kind of request it belongs to*: a conversation continues with the whole
previous context or not at all (the body of a request is reused all together or never), its
partial tail page is re-hashed next turn and is almost never read again, a short follow-up turn is
continued far more often than a long first turn. This policy learns that online and spends cache
time where it pays, but stays with LRU unless the prediction measurably wins.

1. **Classes.** Each access puts the page in a class built only from what the backend sees: how
   it arrived (first write / re-write of a key seen within the horizon / read hit), whether it is
   the last page of a set call (the request's tail), the request's length in pages (for a set
   ``prefix_hits + batch_len``; for a read ``request_len``, the key count of the ``batch_exists``
   that found the hit run) and how much of the request was already cached (bucketed).
2. **Censoring-aware reuse estimate per class.** Every access opens an *observation* of its key,
   closed by the next access of the key (a reuse) or after ``horizon`` x (largest resident count
   seen) accesses. Observations run whether or not the page is still resident (a bounded ghost of
   keys), so the estimate does not feed on the policy's own evictions. Per class the policy counts
   reuses and *exposure* (access ticks observed, open observations included), so the reuse hazard
   ``lambda = reuses / exposure`` is unbiased from the first thousands of accesses on (counting
   only closed observations would see every reuse at once but each failure a whole horizon late,
   i.e. no signal during the first horizon). ``p(class) = 1 - exp(-lambda * horizon)``, smoothed
   towards the overall rate; counts decay geometrically.
3. **Eviction: GreedyDual over predicted reuse.** A page's priority is ``L + (p / p_all)**alpha``
   (``L``: the priority of the last victim; ``p_all``: the overall reuse chance, so every mode has
   the same scale and switching ``alpha`` does not reorder what is resident). ``alpha = 0`` is LRU;
   ``alpha = 1`` keeps a page for a time proportional to its chance of reuse. Priorities are
   chain-monotone: a page never outranks its chain parent of the same request, ties go deepest
   first, so a chain is cut from its end (its head still gives hits). Pages whose chain parent was
   evicted are *orphans* (unreachable by a prefix hit) and go first.
4. **The guard.** Three shadow caches of key sets (same size, same classes) run with
   ``alpha = 0`` (LRU), ``alpha`` and ``2 * alpha`` (``steep``) and count the prefix hits each
   would have had, per request. The per-request differences of each predictor against LRU feed a
   paired z-test (decayed sums): the real cache takes the predictor that is ahead of LRU by ``z``
   standard errors plus ``margin`` of the hits (the transition costs hits before it pays; of two,
   the one further ahead), goes back to LRU when the ``alpha`` predictor is ``z`` standard errors
   behind, and otherwise follows a prior: ``alpha`` when at least ``far_min`` of the observed
   reuses come later than the capacity (what LRU cannot catch, so what prediction can win), LRU
   otherwise. The steeper predictor pays at small capacities (2% of the public trace's blocks).

Invariants:
- ``pop_victim`` returns a resident key and forgets it; ``len`` counts resident keys only.
- Observations (the ghost) hold at most ``horizon * peak + 1024`` keys; shadows hold at most
  ``peak`` keys each (``peak``: the largest resident count seen).
- Deterministic (same calls, same victims); no I/O; not thread-safe (callers lock).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import ClassVar

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy

_NEW, _REWRITE, _HIT = range(3)
_LEN_EDGES = (4, 8, 16, 32, 64, 128)
_PH_EDGES = (1, 2, 4, 16)
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
    gets at most the parent's priority; ``order`` breaks ties (the caller makes it "oldest request
    first, deepest page first"), so a chain is always cut from its end.
    """

    __slots__ = ("heap", "entry", "floor", "_seq", "_last_key", "_last_prio")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, str]] = []
        self.entry: dict[str, int] = {}
        self.floor = 0.0  # L: the priority of the last victim
        self._seq = itertools.count()
        self._last_key: str | None = None
        self._last_prio = 0.0

    def push(self, key: str, value: float, prev: str | None = None, order: int = 0) -> None:
        prio = self.floor + value
        if prev is not None and prev == self._last_key and prio > self._last_prio:
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

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.keys = _Heap()
        self.hits = 0  # in the current request
        self.broken = False

    def access(self, key: str, depth: int, v: float, capacity: int, prev: str | None, order: int) -> None:
        if depth == 0:
            self.broken = False
            self.hits = 0
        if not self.broken:
            if key in self.keys:
                self.hits += 1
            else:
                self.broken = True
        self.keys.push(key, v**self.alpha if self.alpha else 1.0, prev, order)
        while len(self.keys) > capacity:
            self.keys.pop()


@register_policy
class ReusePolicy(EvictionPolicy):
    """Learned reuse chance per class + GreedyDual + chains + statistical LRU guard (module doc)."""

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
        z: float = 2.0,
        margin: float = 0.003,
        far_min: float = 0.2,
        steep: bool = True,
    ) -> None:
        if horizon <= 0:
            raise ValueError(f"reuse horizon must be > 0, got {horizon}")
        if alpha < 0:
            raise ValueError(f"reuse alpha must be >= 0, got {alpha}")
        if not 0.0 < decay <= 1.0 or not 0.0 < adapt_decay <= 1.0:
            raise ValueError("reuse decay and adapt_decay must be in (0, 1]")
        if z < 0 or margin < 0:
            raise ValueError("reuse z and margin must be >= 0")
        self.horizon = horizon
        self.decay = decay
        self.decay_every = decay_every
        self.prior = prior
        self.orphans = orphans
        self.guard = guard
        self.adapt_every = max(1, adapt_every)
        self.adapt_decay = adapt_decay
        self.z = z
        self.margin = margin
        self.far_min = far_min
        self.alpha = 0.0 if guard else alpha
        self._alphas = (0.0, alpha, *([2.0 * alpha] if steep else []))
        self._epoch = 0
        self._res = _Heap()
        self._parent: dict[str, str] = {}
        self._kids: dict[str, set[str]] = {}
        # Observations: key -> (tick, class); FIFO of (tick, key) to close them.
        self._obs: dict[str, tuple[int, int]] = {}
        self._obs_q: deque[tuple[int, str]] = deque()
        self._pos: dict[int, float] = {}  # reuses per class (decayed)
        self._expo: dict[int, float] = {}  # exposure of closed observations per class (decayed)
        self._open_n: dict[int, int] = {}  # open observations per class
        self._open_sum: dict[int, int] = {}  # sum of their opening ticks
        self._p: dict[int, float] = {}
        self._base = 0.5
        self._reuses = 0.0  # observed reuses (decayed) and those further apart than the capacity
        self._far = 0.0
        self._tick = 0
        self._peak = 0
        self._shadows = [_Shadow(a) for a in self._alphas] if guard else []
        # Decayed sums of per-request hit differences (each predictor - LRU) and of their squares.
        self._zs = [0.0] * (len(self._shadows) - 1)
        self._zq = [0.0] * (len(self._shadows) - 1)
        self._zh = 0.0  # ... of the LRU shadow's hits

    # ---- prediction --------------------------------------------------------------------------
    @staticmethod
    def _classify(kind: int, ctx: AccessContext) -> int:
        if kind == _HIT:
            ph = ctx.batch_len
            length = ctx.request_len if ctx.request_len > ph else ph
            tail = 0
        else:
            ph = ctx.prefix_hits
            length = ctx.prefix_hits + ctx.batch_len
            tail = 1 if ctx.position == ctx.batch_len - 1 else 0
        return (kind << 8) | (tail << 7) | (_bucket(length, _LEN_EDGES) << 3) | _bucket(ph, _PH_EDGES)

    def predicted(self, cls: int) -> float:
        """The learned chance that a page of ``cls`` is accessed again within the horizon."""
        p = self._p.get(cls)
        return self._base if p is None else p

    @property
    def far_share(self) -> float:
        """Share of the observed reuses that came later than the capacity (what LRU misses)."""
        return self._far / self._reuses if self._reuses else 0.0

    def _observe(self, key: str, cls: int) -> None:
        self._tick += 1
        tick = self._tick
        old = self._obs.get(key)
        if old is not None:
            self._reuses += 1.0
            if tick - old[0] > self._peak:
                self._far += 1.0
            self._pos[old[1]] = self._pos.get(old[1], 0.0) + 1.0
            self._close(old[1], old[0], tick)
        self._obs[key] = (tick, cls)
        self._open_n[cls] = self._open_n.get(cls, 0) + 1
        self._open_sum[cls] = self._open_sum.get(cls, 0) + tick
        q = self._obs_q
        q.append((tick, key))
        limit = tick - int(self.horizon * max(self._peak, 1)) - 1024
        while q and q[0][0] < limit:
            t, k = q.popleft()
            o = self._obs.get(k)
            if o is not None and o[0] == t:
                del self._obs[k]
                self._close(o[1], t, tick)
        every = self.decay_every or max(1024, self._peak)
        if tick % every == 0:
            self._refresh()

    def _close(self, cls: int, opened: int, tick: int) -> None:
        self._open_n[cls] -= 1
        self._open_sum[cls] -= opened
        self._expo[cls] = self._expo.get(cls, 0.0) + (tick - opened)

    def _refresh(self) -> None:
        tick = self._tick
        expo = dict(self._expo)
        for c, n in self._open_n.items():
            expo[c] = expo.get(c, 0.0) + n * tick - self._open_sum[c]
        etot = sum(expo.values())
        npos = sum(self._pos.values())
        if etot > 0 and npos > 0:
            h = self.horizon * max(self._peak, 1)
            lam = npos / etot
            x = h / 2  # the prior weighs ``prior`` observations of half a horizon each
            w = self.prior * x
            self._base = 1.0 - math.exp(-lam * h)
            self._p = {
                c: 1.0 - math.exp(-h * (self._pos.get(c, 0.0) + lam * w) / (e + w)) for c, e in expo.items()
            }
        d = self.decay
        if d < 1.0:
            self._reuses *= d
            self._far *= d
            for c in self._expo:
                self._expo[c] *= d
            for c in self._pos:
                self._pos[c] *= d

    # ---- the guard ---------------------------------------------------------------------------
    def _shadow_access(self, key: str, depth: int, v: float, prev: str | None, order: int) -> None:
        cap = max(self._peak, 1)
        lru = self._shadows[0]
        if depth == 0:  # the previous request is complete: one paired observation per predictor
            for i, s in enumerate(self._shadows[1:]):
                d = float(s.hits - lru.hits)
                self._zs[i] += d
                self._zq[i] += d * d
            self._zh += lru.hits
        for s in self._shadows:
            s.access(key, depth, v, cap, prev, order)
        if self._tick % self.adapt_every == 0:
            best, best_s = -1, 0.0
            behind = False  # the predictor the prior would pick is significantly behind LRU
            for i, (zs, zq) in enumerate(zip(self._zs, self._zq, strict=True)):
                band = self.z * math.sqrt(zq)
                if zs > band + self.margin * self._zh and zs > best_s:
                    best, best_s = i, zs
                if i == 0 and zs < -band and zs < 0:
                    behind = True
            if best >= 0:
                self.alpha = self._shadows[best + 1].alpha
            elif behind:
                self.alpha = lru.alpha
            else:
                self.alpha = self._shadows[1].alpha if self.far_share >= self.far_min else lru.alpha
            a = self.adapt_decay
            self._zs = [x * a for x in self._zs]
            self._zq = [x * a for x in self._zq]
            self._zh *= a

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
        v = self.predicted(cls) / self._base if self._base > 0 else 1.0
        depth = ctx.position if kind == _HIT else ctx.prefix_hits + ctx.position
        if depth == 0:
            self._epoch += 1
        order = (self._epoch << 24) + (_DEPTH_MAX - min(depth, _DEPTH_MAX))
        prev = ctx.prev_key
        if self._shadows:
            self._shadow_access(key, depth, v, prev, order)
        self._res.push(key, v**self.alpha if self.alpha else 1.0, prev, order)
        self._link(key, prev)
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
        self._res = _Heap()
        self._parent.clear()
        self._kids.clear()
        self._obs.clear()
        self._obs_q.clear()
        self._open_n.clear()
        self._open_sum.clear()
        self._shadows = [_Shadow(a) for a in self._alphas] if self.guard else []
        self._zs = [0.0] * (len(self._shadows) - 1)
        self._zq = [0.0] * (len(self._shadows) - 1)
        self._zh = 0.0
