"""The reuse policy as it was in Python, access by access: the reference model that
``test_reuse_native.py`` holds ``ReusePolicy`` (its per-access bookkeeping in one native call per
batch, ``native.ReuseLedger``) to. Same inputs, same victims, same learned values.

Kept as it ran in production before the native ledger (tiers/policy/reuse.py at 2833588), with
the registration removed; the module docstring of that file describes the policy.
"""

from __future__ import annotations

import heapq
import math
from typing import ClassVar

from hicache_mooncake.native import RecencyLog
from hicache_mooncake.tiers.policy.base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from hicache_mooncake.tiers.policy.hints import Hints, HintState

_NEW, _REWRITE, _HIT = range(3)
_SLACK = 4096  # run-list entries (and heap entries) allowed beyond twice the resident pages
_SWEEP_STEP = 256  # a sweep step's budget: each run it looks at costs 1 + its entries
_DEPTH_MAX = (1 << 24) - 1


def _bucket(n: int, edges: tuple[int, ...]) -> int:
    for i, e in enumerate(edges):
        if n < e:
            return i
    return len(edges)


_LEN_EDGES = (4, 8, 16, 32, 64, 128)
_PH_EDGES = (1, 2, 4, 16)
_LEN_B = tuple(_bucket(n, _LEN_EDGES) for n in range(_LEN_EDGES[-1] + 1))
_PH_B = tuple(_bucket(n, _PH_EDGES) for n in range(_PH_EDGES[-1] + 1))
_NL, _NP = len(_LEN_EDGES) + 1, len(_PH_EDGES) + 1
#: class = (((hint * 3 + kind) * 2 + tail) * _NL + length bucket) * _NP + prefix-hit bucket
#: (a hinted page: buckets 0)
_PER_HINT = 3 * 2 * _NL * _NP
_N_CLASSES = len(HintState) * _PER_HINT
_KIND_BASE = tuple(i * _NL * _NP for i in range(len(HintState) * 3 * 2))
_LP = tuple(tuple(_LEN_B[n] * _NP + _PH_B[p] for p in range(len(_PH_B))) for n in range(len(_LEN_B)))
#: a first write's class -> the class of the same write of a key observed within the horizon
_REWRITE_SHIFT = _KIND_BASE[2 * _REWRITE] - _KIND_BASE[2 * _NEW]
_CLS_BITS = 10
_CLS_MASK = (1 << _CLS_BITS) - 1
assert _N_CLASSES <= _CLS_MASK


class RefReusePolicy(EvictionPolicy):
    """Learned reuse chance per class + GreedyDual over runs + LRU guard (module docstring)."""

    name = "reuse-reference"
    #: One instance should own the whole capacity (``TierPlacement``); per-tier use is allowed.
    upper_tier_options: ClassVar[dict[str, object]] = {}

    def __init__(
        self,
        horizon: float = 4.0,
        alpha: float = 1.0,
        steep: float = 2.0,
        adaptive: bool = True,
        far_lru: float = 0.15,
        far_steep: float = 0.6,
        warm: float = 2.0,
        hint_trust: float = 3.0,
        decay: float = 0.9,
        prior: float = 5.0,
        guard: bool = True,
        adapt_every: int = 2048,
        adapt_decay: float = 0.9,
        z: float = 3.0,
        margin: float = 0.003,
    ) -> None:
        if horizon <= 0:
            raise ValueError(f"reuse horizon must be > 0, got {horizon}")
        if alpha < 0 or steep < 0:
            raise ValueError(f"reuse alpha and steep must be >= 0, got {alpha}, {steep}")
        if not 0.0 < decay <= 1.0 or not 0.0 < adapt_decay <= 1.0:
            raise ValueError("reuse decay and adapt_decay must be in (0, 1]")
        if z < 0 or margin < 0:
            raise ValueError("reuse z and margin must be >= 0")

        self.horizon = horizon
        self.base_alpha = alpha
        self.steep = steep
        self.adaptive = adaptive
        self.far_lru = far_lru
        self.far_steep = far_steep
        self.warm = warm
        self.hint_trust = hint_trust
        self.decay = decay
        self.prior = prior
        self.guard = guard
        self.adapt_every = max(1, adapt_every)
        self.adapt_decay = adapt_decay
        self.z = z
        self.margin = margin
        self._hints: Hints | None = None
        self._reset()

    def _reset(self) -> None:
        self.alpha = self.base_alpha
        # resident pages: key -> run id; runs: run id -> keys (chain order); heap of (prio, order, run)
        self._where: dict[str, int] = {}
        self._runs: dict[int, list[str]] = {}
        # heap entries: (priority, order, run, floor at the push, class; -1 for a pinned page)
        self._heap: list[tuple[float, int, int, float, int]] = []
        self._floor = 0.0
        self._next_rid = 0
        self._last_key: str | None = None
        self._last_rid = -1
        self._last_prio = 0.0
        self._slots = 0  # entries of the run lists, stale ones included
        self._sweep_rids: list[int] | None = None  # the runs a sweep goes through (None: none runs)
        self._sweep_at = 0  # the next of them
        self._epoch = 0
        self._peak = 0
        # observations (key -> (open tick << _CLS_BITS) | class) and the guard's LRU shadow: one
        # access order (recency_log)
        self._log = RecencyLog(_CLS_BITS)
        self._tick = 0
        self._next_refresh = 1024
        self._obs_limit = 1024
        self._pos = [0.0] * _N_CLASSES  # reuses per class (decayed)
        self._expo = [0.0] * _N_CLASSES  # exposure of closed observations (decayed)
        self._open_n = [0] * _N_CLASSES  # open observations per class
        self._open_sum = [0] * _N_CLASSES  # sum of their opening ticks
        self._p: list[float] = [0.5] * _N_CLASSES
        self._base = 0.5
        self._v: list[float] = [1.0] * _N_CLASSES
        self._far = 0.0  # observed reuses (decayed) further apart than the capacity
        self._reuses = 0.0  # all observed reuses (decayed) since the warm-up, as of the last refresh
        self._far_base = 0.0  # reuses (decayed) observed during the warm-up
        self._warm = True  # the share is not counted yet (see _choose_alpha)
        self._hint_ratio = 0.0
        # the guard: per-request hits of the LRU shadow and of the real cache, decayed paired sums
        self._sh_hits = 0
        self._sh_broken = False
        self._real_hits = 0
        self._zs = self._zq = self._zh = 0.0
        self._lru_until = 0  # tick until which the guard holds LRU
        self._hold = 0
        self._warm_until = 0  # ticks after a switch that the test ignores
        self._tested_alpha = 0.0  # the alpha the current test is about
        self._remap = False  # cached pages are to be re-valued at the next _set_values
        self._full_tick = -1  # tick of the first eviction
        self._next_adapt = self.adapt_every

    # ---- hints -------------------------------------------------------------------------------
    def use_hints(self, hints: Hints | None) -> None:
        self._hints = hints

    # ---- prediction --------------------------------------------------------------------------
    def predicted(self, cls: int) -> float:
        """The learned chance that a page of ``cls`` is accessed again within the horizon."""
        return self._p[cls]

    @property
    def far_share(self) -> float:
        """Share of the reuses within the horizon that come later than the capacity (what LRU
        misses)."""
        return min(1.0, self._far / self._reuses) if self._reuses else 0.0

    def _refresh(self) -> None:
        tick = self._tick
        peak = max(self._peak, 1)
        self._next_refresh = tick + max(1024, peak)
        pos, open_n = self._pos, self._open_n
        exp_c = [e + n * tick - o for e, n, o in zip(self._expo, open_n, self._open_sum, strict=True)]
        etot = sum(exp_c)
        npos = sum(pos)
        if etot > 0 and npos > 0:
            h = self.horizon * peak
            lam = npos / etot
            w = self.prior * h / 2  # the prior weighs ``prior`` observations of half a horizon
            lw = lam * w
            self._base = 1.0 - math.exp(-lam * h)
            self._p = [1.0 - math.exp(-h * (r + lw) / (e + w)) for r, e in zip(pos, exp_c, strict=True)]
        self._reuses = npos - self._far_base
        self._hint_ratio = self._hint_separation(pos, exp_c)
        self._choose_alpha()
        self._set_values()
        d = self.decay
        if d < 1.0:
            # closed observations decay; an open one counts in full when it closes
            self._far *= d
            self._far_base *= d
            self._expo = [e * d for e in self._expo]
            self._pos = [r * d for r in pos]

    @staticmethod
    def _hint_separation(pos: list[float], exposure: list[float]) -> float:
        """How much more often pages hinted LIKELY are reused than pages hinted UNLIKELY (the
        ratio of their pooled reuse hazards; 0 while either is unknown)."""
        rates = []
        for h in (HintState.LIKELY, HintState.UNLIKELY):
            lo, hi = h * _PER_HINT, (h + 1) * _PER_HINT
            e = sum(exposure[lo:hi])
            r = sum(pos[lo:hi])
            if e <= 0 or r <= 0:
                return 0.0
            rates.append(r / e)
        return rates[0] / rates[1]

    def _set_values(self) -> None:
        """``v = p**alpha``, scaled so that its mean over the observed pages is 1: in every mode
        a page is kept one cache turnover on average, so a change of ``alpha`` neither favours
        nor starves the pages already cached."""
        a = self.alpha
        if a == 0:
            self._v = [1.0] * _N_CLASSES
            if self._remap:
                self._revalue()
            return
        raw = [p**a for p in self._p]
        n = self._open_n
        total = sum(n)
        mean = sum(v * k for v, k in zip(raw, n, strict=True)) / total if total > 0 else 0.0
        if mean <= 0:
            mean = self._base**a or 1.0
        self._v = [v / mean for v in raw]
        if self._remap:
            self._revalue()

    def _revalue(self) -> None:
        """``alpha`` changed a lot: every run's priority becomes what it would have been under
        the new values (pages valued under a steep mode would otherwise outlive an LRU mode by
        several turnovers, and the reverse)."""
        self._remap = False
        v = self._v
        runs = self._runs
        self._heap = [
            (lp + v[c] if c >= 0 else pr, order, rid, lp, c)
            for pr, order, rid, lp, c in self._heap
            if rid in runs
        ]
        heapq.heapify(self._heap)
        self._last_key = None

    def _choose_alpha(self) -> None:
        """``alpha`` from the share of reuses that come later than the capacity (``far``): LRU
        (0) up to ``far_lru``, ``alpha`` from ``far_lru + 0.1``, rising to ``steep`` between
        ``far_steep - 0.1`` and ``far_steep + 0.1``; 0 while the guard holds LRU."""
        if self.guard and self._tick < self._lru_until:
            self.alpha = 0.0
        elif not self.adaptive:
            self.alpha = self.base_alpha
        elif self._warm and not self._warming():
            # warmed up: from now on the share is counted from reuse events (cheaper); the
            # events so far are biased (later reuses could not all have been seen)
            self._warm = False
            self._far = 0.0
            self._far_base = sum(self._pos)
        else:
            far, a = self.far_share, self.base_alpha
            lo = min(1.0, max(0.0, (far - self.far_lru) / 0.1))
            hi = min(1.0, max(0.0, (far - self.far_steep + 0.1) / 0.2))
            self.alpha = a * lo + (self.steep - a) * hi
            if self._hint_ratio >= self.hint_trust and self.alpha < a:
                # hints that separate reused pages from the others are worth acting on even
                # where LRU would catch most reuses
                self.alpha = a
        if abs(self.alpha - self._tested_alpha) >= 0.25:
            # a new mode: cached pages are re-valued (``_set_values``) and the guard tests it
            # afresh once the cache has turned over
            self._tested_alpha = self.alpha
            self._remap = True
            self._warm_until = max(self._warm_until, self._tick + max(self._peak, 1024))
            self._zs = self._zq = self._zh = 0.0

    def _warming(self) -> bool:
        """Until ``warm`` x capacity accesses after the first eviction: reuses later than the
        capacity cannot all have been seen yet."""
        full = self._full_tick
        return full < 0 or self._tick < full + self.warm * self._peak

    # ---- the guard ---------------------------------------------------------------------------
    def _end_request(self) -> None:
        """The previous request is complete: one paired observation (real - LRU)."""
        if self._tick >= self._warm_until and not self._warming():
            d = float(self._real_hits - self._sh_hits)
            self._zs += d
            self._zq += d * d
            self._zh += self._sh_hits
        self._real_hits = self._sh_hits = 0
        self._sh_broken = False
        if self._tick >= self._next_adapt:
            self._next_adapt = self._tick + self.adapt_every
            self._adapt()

    def _adapt(self) -> None:
        if self._tick < self._lru_until:
            return
        band = self.z * math.sqrt(self._zq)
        if self.alpha > 0 and self._zs < -(band + self.margin * self._zh):
            # the predictor is significantly behind LRU: hold LRU, longer each time
            self._hold = max(2 * self._hold, 8 * max(self._peak, 1024))
            self._lru_until = self._tick + self._hold
            self._warm_until = self._lru_until + max(self._peak, 1024)
            self._zs = self._zq = self._zh = 0.0
            self._choose_alpha()
            self._set_values()
            return
        if self._zs > band and self._hold:
            self._hold //= 2
        a = self.adapt_decay
        self._zs *= a
        self._zq *= a
        self._zh *= a

    # ---- the one access path -----------------------------------------------------------------
    def _access(self, key: str, kind: int, ctx: AccessContext, read: bool) -> None:
        """One access (``read``: a hit of a get; otherwise a set). ``kind`` ``_NEW`` means a set
        of a key not resident: it is a ``_REWRITE`` if the key turns out to be observed (one
        probe of the observations decides both)."""
        position = ctx.position
        if read:
            ph = ctx.batch_len
            length = ctx.request_len
            if length < ph:
                length = ph
            tail = 0
            depth = position
        else:
            ph = ctx.prefix_hits
            n = ctx.batch_len
            length = ph + n
            tail = 1 if position == n - 1 else 0
            depth = ph + position
        hints = self._hints
        hint = hints.state(key) if hints is not None and hints.active else 0
        cls = _KIND_BASE[(hint * 3 + kind) * 2 + tail] + (
            0 if hint else _LP[length if length < 128 else 128][ph if ph < 16 else 16]
        )
        self._tick = tick = self._tick + 1
        if depth == 0:  # a new request: the previous one is complete
            self._epoch += 1
            if self.guard:
                self._end_request()

        # Observation: close the key's previous one (a reuse), open a new one. Per class: decayed
        # reuses and exposure of closed observations; count and tick sum of the open ones. The
        # same step moves the key to the front of the LRU shadow.
        expo, open_n, open_sum = self._expo, self._open_n, self._open_sum
        log = self._log
        seen = cls + _REWRITE_SHIFT if kind == _NEW else None
        old, in_shadow, expired = log.touch(hash(key), tick, cls, self._peak, self._obs_limit, seen)
        if old is not None:
            if seen is not None:
                cls = seen
            oc = old & _CLS_MASK
            ot = old >> _CLS_BITS
            self._pos[oc] += 1.0
            open_n[oc] -= 1
            open_sum[oc] -= ot
            expo[oc] += tick - ot
            if tick - ot > self._peak:
                self._far += 1.0
        open_n[cls] += 1
        open_sum[cls] += tick
        if expired is not None:
            oc = expired & _CLS_MASK
            ot = expired >> _CLS_BITS
            open_n[oc] -= 1
            open_sum[oc] -= ot
            expo[oc] += tick - ot
        if tick >= self._next_refresh:
            self._refresh()

        if self.guard:  # the LRU shadow's hit run of this request
            if read:
                self._real_hits += 1
            if not in_shadow:
                self._sh_broken = True
            elif not self._sh_broken:
                self._sh_hits += 1

        # GreedyDual push, chain-monotone, into the current run when the priority is capped
        where = self._where
        prio = self._floor + self._v[cls]
        prev = ctx.prev_key
        if prev is not None and prev == self._last_key and prio >= self._last_prio:
            run = self._runs.get(self._last_rid)
            if run is not None:
                run.append(key)
                where[key] = self._last_rid
                self._last_key = key
                self._slots += 1
                if len(where) > self._peak:
                    self._grow(len(where))
                if self._sweep_rids is not None:
                    self._sweep()
                return
            prio = self._last_prio
        rid = self._next_rid
        self._next_rid = rid + 1
        self._runs[rid] = [key]
        where[key] = rid
        order = (self._epoch << 24) + _DEPTH_MAX - (depth if depth < _DEPTH_MAX else _DEPTH_MAX)
        heapq.heappush(self._heap, (prio, order, rid, self._floor, cls))
        self._last_key, self._last_rid, self._last_prio = key, rid, prio
        self._slots += 1
        if len(where) > self._peak:
            self._grow(len(where))
        if self._sweep_rids is not None:
            self._sweep()
        elif self._slots > 2 * len(where) + _SLACK:
            self._sweep_rids = list(self._runs)  # the runs to sweep, oldest first
            self._sweep_at = 0

    def _grow(self, resident: int) -> None:
        self._peak = resident
        # at least the shadow's size: the shadow is the newest part of the observations
        self._obs_limit = int(max(self.horizon, 1.0) * resident) + 1024

    def _sweep(self) -> None:
        """One step of a sweep: drop the stale entries (keys accessed again since, or gone) of
        the next runs, up to a budget of ``_SWEEP_STEP`` (a run costs 1 + its entries). A run
        left empty is dropped (its heap entry is skipped when it comes up; the current run is
        never empty here: it holds the key just accessed). So victims are exactly those of a
        policy that never sweeps. A sweep starts when the run lists hold more than
        ``2 * resident + _SLACK`` entries and takes one step per access (at most
        ``_SWEEP_STEP`` runs, and the entries of the longest), so it ends after about
        (entries + runs) / ``_SWEEP_STEP`` accesses. One pass over every run at once would stall
        the store for a time that grows with the residents."""
        rids, i = self._sweep_rids, self._sweep_at
        assert rids is not None
        runs, where = self._runs, self._where
        budget = _SWEEP_STEP
        while budget > 0 and i < len(rids):
            rid = rids[i]
            i += 1
            keys = runs.get(rid)
            if keys is None:  # evicted since the sweep started
                budget -= 1
                continue
            budget -= 1 + len(keys)
            live = [k for k in keys if where.get(k) == rid]
            if len(live) == len(keys):
                continue
            self._slots -= len(keys) - len(live)
            if live:
                keys[:] = live
            else:
                del runs[rid]
        self._sweep_at = i
        if i == len(rids):
            self._sweep_rids = None
            if len(self._heap) > 2 * len(runs) + _SLACK:
                # entries of dropped runs that no eviction has reached (a cache that is not full)
                self._heap = [e for e in self._heap if e[2] in runs]
                heapq.heapify(self._heap)

    # ---- EvictionPolicy ----------------------------------------------------------------------
    def on_set(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        self._access(key, _HIT if key in self._where or ctx.promoted else _NEW, ctx, False)
        return True

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.on_set(key, ctx)

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._where:
            self._access(key, _HIT, ctx, True)

    def on_remove(self, key: str) -> None:
        self._where.pop(key, None)

    def pop_victim(self) -> str | None:
        heap, runs, where = self._heap, self._runs, self._where
        hints = self._hints
        pinned = hints is not None and hints.pinning
        spared = 0
        while heap:
            prio, _, rid, _, _ = heap[0]
            keys = runs.get(rid)
            if keys is None:  # dropped by a sweep
                heapq.heappop(heap)
                continue
            while keys:
                key = keys.pop()
                self._slots -= 1
                if where.get(key) != rid:
                    continue
                if pinned and spared < 64 and hints.pinned(key):  # type: ignore[union-attr]
                    spared += 1
                    self._requeue(key)
                    continue
                del where[key]
                if prio > self._floor:
                    self._floor = prio
                if self._full_tick < 0:
                    self._full_tick = self._tick
                return key
            heapq.heappop(heap)
            del runs[rid]
            if rid == self._last_rid:
                self._last_key = None
        return None

    def _requeue(self, key: str) -> None:
        """A pinned page came up for eviction: it goes back as if just accessed, with the
        highest value any class has (a pin outlasts one trip through the cache)."""
        rid = self._next_rid
        self._next_rid = rid + 1
        self._runs[rid] = [key]
        self._where[key] = rid
        self._slots += 1
        heapq.heappush(self._heap, (self._floor + max(self._v), self._epoch << 24, rid, self._floor, -1))
        self._last_key = None

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def observations(self) -> int:
        """Open observations: keys accessed within the horizon, resident or not (what the policy
        keeps beyond its residents; ``bench scale`` reports it)."""
        return len(self._log)

    def clear(self) -> None:
        self._reset()
