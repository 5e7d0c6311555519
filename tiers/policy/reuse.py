"""Reuse-predicting, chain-aware eviction with an LRU guard (the default policy).

A KV page is worth keeping only if it will be read again, and on prefix-sharing workloads that is
mostly decided by *what kind of request it belongs to*: a conversation continues with the whole
previous context or not at all (the body of a request is reused all together or never), its
partial tail page is re-hashed next turn and is almost never read again, a short follow-up turn is
continued far more often than a long first turn. This policy learns that online, spends cache
time where it pays, and stays LRU where prediction cannot win.

1. **Classes.** Each access puts the page in a class built only from what the backend sees: how
   it arrived (first write / re-write of a key seen within the horizon / read hit), whether it is
   the last page of a set call (the request's tail), the request's length in pages (for a set
   ``prefix_hits + batch_len``; for a read ``request_len``, the key count of the ``batch_exists``
   that found the hit run), how much of the request was already cached (bucketed), and the page's
   hint state (``hints.HintState``: none / likely / unlikely / shared). A hinted page's class is
   only (hint, arrival, tail): the hint says more than length and prefix do.
2. **Censoring-aware reuse estimate per class.** Every access opens an *observation* of its key,
   closed by the next access of the key (a reuse) or when ``horizon`` x (largest resident count
   seen) other keys have been observed since (a bounded LRU list of keys, whether or not the page
   is still resident, so the estimate does not feed on the policy's own evictions). Per class the
   policy counts reuses and *exposure* (access ticks observed, open observations included), so the
   reuse hazard ``lambda = reuses / exposure`` is right from the first thousands of accesses on.
   ``p(class) = 1 - exp(-lambda * horizon)``, smoothed towards the overall rate; counts decay.
   Hints therefore count for what they have proven to be worth.
3. **Eviction: GreedyDual over predicted reuse.** A page's priority is ``L + v(class)`` with
   ``v = p**alpha`` scaled to mean 1 (``L``: the priority of the last victim). ``alpha = 0`` is
   LRU; ``alpha = 1`` keeps a page for a time proportional to its chance of reuse; ``steep``
   spends even more cache time on likely pages. Priorities are chain-monotone: a page never
   outranks its chain parent of the same request. Pages are kept in *runs* (consecutive chain
   pages of one call with one priority) in a heap of runs; a run gives up its deepest page first,
   so a chain is cut from its end and its head keeps giving hits.
4. **alpha from the traffic, not from a shadow.** Prediction can only win the reuses LRU misses:
   those that come later than the capacity. ``far`` is their share of the reuses within the
   horizon (counted from reuse events once the cache has been full for ``warm`` capacities; before
   that, later reuses cannot all have been seen). ``alpha`` is 0 up to ``far_lru``, ``alpha`` from
   ``far_lru + 0.1``, and rises to ``steep`` between ``far_steep -+ 0.1``. Hints that separate
   (likely pages reused ``hint_trust`` times more often than unlikely ones) keep ``alpha`` at
   least at ``alpha``. When ``alpha`` moves by 0.25 or more, cached runs are re-valued as if
   pushed under the new values (else pages valued in a steep mode outlive an LRU mode).
5. **The guard.** One key-only LRU shadow cache of the same size counts the prefix hits LRU would
   have had, per request; the per-request differences (real - LRU) feed a paired z-test (decayed
   sums; a new mode is tested once the cache has turned over). When the real cache is ``z``
   standard errors plus ``margin`` of the hits behind LRU, it runs as LRU for a hold time that
   doubles each time the predictor loses again, then tries the predictor again.

Cost: one call per operation (``on_set`` answers in one step; ``on_set_batch`` and
``on_hit_batch`` take a whole batch): the per-access bookkeeping of a batch (class, observation
and LRU shadow in the ``RecencyLog``, per-class counters, the guard's counts, GreedyDual priority
and run membership) is one native ``ReuseLedger`` call, which stops only where a decision is due
(a refresh of the class values, the guard's test) and resumes after it. Python then extends the
runs a slice at a time and pushes one heap entry per new run (not per page). No access does work
in proportion to the cache: stale run entries are swept a few hundred per access, the
observations' log is compacted a window every 128 accesses, its table grows one segment at a
time. What is still O(cache) in one call: re-valuing the runs when ``alpha`` moves by 0.25 or
more (a ``heapify``), and dropping the heap entries of swept runs when a cache that does not
evict has piled them up.

Invariants:
- ``pop_victim`` returns a resident key and forgets it; ``len`` counts resident keys only.
- Observations hold at most ``max(horizon, 1) * peak + 1024`` keys, the shadow at most ``peak``
  keys (``peak``: the largest resident count seen, ``ReuseLedger.peak``), both in one
  ``RecencyLog`` by the keys' fingerprints (43-69 bytes per observed key, none of them the key's
  string); run lists hold about ``2 * peak + 4096`` entries at most (stale ones are swept away; while a sweep runs, at
  most one more per ``_SWEEP_STEP`` accesses, and a sweep starts after a batch, not within it).
- A page pinned in ``Hints`` is put back, not evicted, while the pin holds (at most 64 in a row
  per eviction, so pins cannot stall the store).
- Deterministic (same calls, same victims: a batch decides as its accesses one by one do, held
  to the per-access Python reference in ``tests/policy/reuse_reference.py``); no I/O; not
  thread-safe (callers lock). Hints are read, never written (``Hints`` is thread-safe on its
  own).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from itertools import compress
from typing import ClassVar

import numpy as np

from hicache_mooncake.native import KeyOrder, RecencyLog, ReuseLedger

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .hints import Hints, HintState
from .registry import register_policy

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
#: the class tables as the native ledger reads them: _KIND_BASE, and _LP row-major
_KIND_BASE_ARRAY = np.array(_KIND_BASE, np.int64)
_LP_ARRAY = np.array(_LP, np.int64).ravel()
_LP_COLS = len(_PH_B)
_DONE, _ADAPT, _REFRESH = range(3)  # what ReuseLedger.access stopped for


@register_policy
class ReusePolicy(EvictionPolicy):
    """Learned reuse chance per class + GreedyDual over runs + LRU guard (module docstring)."""

    name = "reuse"
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
        # resident pages: key -> run id (a native ordered map: a batch is one call); runs: run id ->
        # keys (chain order); heap of (prio, order, run)
        self._where = KeyOrder()
        self._runs: dict[int, list[str]] = {}
        # heap entries: (priority, order, run, floor at the push, class; -1 for a pinned page)
        self._heap: list[tuple[float, int, int, float, int]] = []
        self._slots = 0  # entries of the run lists, stale ones included
        self._news: list[tuple[int, int, float, int, float, int]] = []  # ReuseLedger.access's output
        self._sweep_rids: list[int] | None = None  # the runs a sweep goes through (None: none runs)
        self._sweep_at = 0  # the next of them
        # observations (key -> (open tick << _CLS_BITS) | class) and the guard's LRU shadow: one
        # access order (recency_log)
        self._log = RecencyLog(_CLS_BITS)
        self._pos = np.zeros(_N_CLASSES)  # reuses per class (decayed)
        self._expo = np.zeros(_N_CLASSES)  # exposure of closed observations (decayed)
        self._open_n = np.zeros(_N_CLASSES, np.int64)  # open observations per class
        self._open_sum = np.zeros(_N_CLASSES, np.int64)  # sum of their opening ticks
        self._v = np.ones(_N_CLASSES)  # the class values (``_set_values``)
        # the per-access bookkeeping (native): the tick, the observations and the counters above,
        # the guard's per-request counts and sums, GreedyDual's floor and the current run
        self._c = ReuseLedger(
            self._log, self._pos, self._expo, self._open_n, self._open_sum, self._v,
            _KIND_BASE_ARRAY, _LP_ARRAY, _LP_COLS, _REWRITE_SHIFT,
            self.horizon, self.warm, self.guard, self.adapt_every,
        )  # fmt: skip
        self._c.next_refresh = 1024
        self._c.obs_limit = 1024
        self._c.next_adapt = self.adapt_every
        self._p: list[float] = [0.5] * _N_CLASSES
        self._base = 0.5
        self._reuses = 0.0  # all observed reuses (decayed) since the warm-up, as of the last refresh
        self._far_base = 0.0  # reuses (decayed) observed during the warm-up
        self._warm = True  # the share is not counted yet (see _choose_alpha)
        self._hint_ratio = 0.0
        self._lru_until = 0  # tick until which the guard holds LRU
        self._hold = 0
        self._tested_alpha = 0.0  # the alpha the current test is about
        self._remap = False  # cached pages are to be re-valued at the next _set_values

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
        return min(1.0, self._c.far / self._reuses) if self._reuses else 0.0

    def _refresh(self) -> None:
        c = self._c
        tick = c.tick
        peak = max(c.peak, 1)
        c.next_refresh = tick + max(1024, peak)
        pos, open_n = self._pos.tolist(), self._open_n.tolist()
        exp_c = [
            e + n * tick - o
            for e, n, o in zip(self._expo.tolist(), open_n, self._open_sum.tolist(), strict=True)
        ]
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
            c.far *= d
            self._far_base *= d
            self._expo *= d
            self._pos *= d

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
            self._v[:] = 1.0
            if self._remap:
                self._revalue()
            return
        raw = [p**a for p in self._p]
        n = self._open_n.tolist()
        total = sum(n)
        mean = sum(v * k for v, k in zip(raw, n, strict=True)) / total if total > 0 else 0.0
        if mean <= 0:
            mean = self._base**a or 1.0
        self._v[:] = [v / mean for v in raw]
        if self._remap:
            self._revalue()

    def _revalue(self) -> None:
        """``alpha`` changed a lot: every run's priority becomes what it would have been under
        the new values (pages valued under a steep mode would otherwise outlive an LRU mode by
        several turnovers, and the reverse)."""
        self._remap = False
        v = self._v.tolist()
        runs = self._runs
        self._heap = [
            (lp + v[c] if c >= 0 else pr, order, rid, lp, c)
            for pr, order, rid, lp, c in self._heap
            if rid in runs
        ]
        heapq.heapify(self._heap)
        self._c.last_key = None

    def _choose_alpha(self) -> None:
        """``alpha`` from the share of reuses that come later than the capacity (``far``): LRU
        (0) up to ``far_lru``, ``alpha`` from ``far_lru + 0.1``, rising to ``steep`` between
        ``far_steep - 0.1`` and ``far_steep + 0.1``; 0 while the guard holds LRU."""
        c = self._c
        if self.guard and c.tick < self._lru_until:
            self.alpha = 0.0
        elif not self.adaptive:
            self.alpha = self.base_alpha
        elif self._warm and not self._warming():
            # warmed up: from now on the share is counted from reuse events (cheaper); the
            # events so far are biased (later reuses could not all have been seen)
            self._warm = False
            c.far = 0.0
            self._far_base = sum(self._pos.tolist())
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
            c.warm_until = max(c.warm_until, c.tick + max(c.peak, 1024))
            c.zs = c.zq = c.zh = 0.0

    def _warming(self) -> bool:
        """Until ``warm`` x capacity accesses after the first eviction: reuses later than the
        capacity cannot all have been seen yet."""
        c = self._c
        full = c.full_tick
        return full < 0 or c.tick < full + self.warm * c.peak

    # ---- the guard -------------------------------------------------------------------------
    # A request's first page ends the previous request: its paired observation (real - LRU hits)
    # is summed by the ledger, which returns ADAPT when the test is due (``_adapt``).

    def _adapt(self) -> None:
        c = self._c
        if c.tick < self._lru_until:
            return
        band = self.z * math.sqrt(c.zq)
        if self.alpha > 0 and c.zs < -(band + self.margin * c.zh):
            # the predictor is significantly behind LRU: hold LRU, longer each time
            self._hold = max(2 * self._hold, 8 * max(c.peak, 1024))
            self._lru_until = c.tick + self._hold
            c.warm_until = self._lru_until + max(c.peak, 1024)
            c.zs = c.zq = c.zh = 0.0
            self._choose_alpha()
            self._set_values()
            return
        if c.zs > band and self._hold:
            self._hold //= 2
        a = self.adapt_decay
        c.zs *= a
        c.zq *= a
        c.zh *= a

    # ---- the one access path -----------------------------------------------------------------
    def _record(
        self, keys: Sequence[str], ctxs: Sequence[AccessContext], read: bool, in_where: bytes | None
    ) -> None:
        """The accesses of ``keys`` in order (``read``: hits of a get, the keys resident; else
        sets, ``in_where`` flagging the resident ones; a set's keys are distinct). The ledger
        records each access (class, observation, counters, guard, GreedyDual priority) and names
        the new runs; it stops where a decision is due (``_adapt``, ``_refresh``), and the
        accesses so far are pushed into the runs first, so a decision sees every earlier access
        as the per-access order would."""
        c = self._c
        hints = self._hints
        states = bytes(map(hints.state, keys)) if hints is not None and hints.active else None
        news = self._news
        index = stage = done = 0
        while True:
            rid = c.last_rid  # the run the first accesses join, if they join one
            try:
                index, stage, event = c.access(
                    keys, ctxs, index, stage, read, in_where, states, news, len(self._where)
                )
            except BaseException:
                if c.stopped_at >= 0:  # the accesses before it are recorded: push them
                    self._push(keys, done, c.stopped_at, news, rid)
                news.clear()
                raise
            self._push(keys, done, index, news, rid)
            news.clear()
            done = index
            if event == _DONE:
                break
            if event == _ADAPT:
                self._adapt()
            else:
                self._refresh()
        if self._sweep_rids is not None:
            self._sweep(len(keys) * _SWEEP_STEP)
        elif self._slots > 2 * len(self._where) + _SLACK:
            self._sweep_rids = list(self._runs)  # the runs to sweep, oldest first
            self._sweep_at = 0

    def _push(
        self,
        keys: Sequence[str],
        start: int,
        stop: int,
        news: list[tuple[int, int, float, int, float, int]],
        rid: int,
    ) -> None:
        """``keys[start:stop]`` into their runs: the accesses before the first of ``news`` join
        run ``rid``, each of ``news`` ``(index, run, priority, order, floor, class)`` opens a run
        (pushed on the heap) that the accesses up to the next one join."""
        if stop <= start:
            return
        runs, where = self._runs, self._where
        if stop - start == 1 and len(news) <= 1:  # one access (a per-key call): no slices
            key = keys[start]
            if news:
                _, rid, prio, order, floor, cls = news[0]
                runs[rid] = [key]
                heapq.heappush(self._heap, (prio, order, rid, floor, cls))
            else:
                runs[rid].append(key)
            where[key] = rid
            self._slots += 1
            return
        at = start
        for index, new_rid, prio, order, floor, cls in news:
            if index >= stop:
                break
            if index > at:
                seg = keys[at:index]
                runs[rid].extend(seg)
                where.put_many(seg, rid)
            runs[new_rid] = []
            heapq.heappush(self._heap, (prio, order, new_rid, floor, cls))
            rid, at = new_rid, index
        seg = keys[at:stop]
        runs[rid].extend(seg)
        where.put_many(seg, rid)
        self._slots += stop - start

    def _sweep(self, budget: int) -> None:
        """Steps of a sweep: drop the stale entries (keys accessed again since, or gone) of the
        next runs, up to ``budget`` (a run costs 1 + its entries; a batch of accesses gives
        ``_SWEEP_STEP`` each). A run left empty is dropped (its heap entry is skipped when it
        comes up; the ledger is told when it was the current run, which a later access then
        cannot join). So victims are exactly those of a policy that never sweeps. A sweep starts
        when the run lists hold more than ``2 * resident + _SLACK`` entries after a batch, so it
        ends after about (entries + runs) / ``_SWEEP_STEP`` accesses. One pass over every run
        at once would stall the store for a time that grows with the residents."""
        rids, i = self._sweep_rids, self._sweep_at
        assert rids is not None
        runs, where = self._runs, self._where
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
                if rid == self._c.last_rid:
                    self._c.last_run_alive = False
        self._sweep_at = i
        if i == len(rids):
            self._sweep_rids = None
            if len(self._heap) > 2 * len(runs) + _SLACK:
                # entries of dropped runs that no eviction has reached (a cache that is not full)
                self._heap = [e for e in self._heap if e[2] in runs]
                heapq.heapify(self._heap)

    # ---- EvictionPolicy ----------------------------------------------------------------------
    def on_set(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        self._record((key,), (ctx,), False, b"\x01" if key in self._where else b"\x00")
        return True

    def on_set_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[bool]:
        """The batch's accesses in one ledger call (distinct keys; a batch with a repeated key
        takes ``on_set`` per key, which decides the same)."""
        if len(set(keys)) != len(keys):
            return super().on_set_batch(keys, ctxs)
        keys = keys if isinstance(keys, list | tuple) else list(keys)
        ctxs = ctxs if isinstance(ctxs, list | tuple) else list(ctxs)
        self._record(keys, ctxs, False, bytes(self._where.contains_many(keys)))
        return [True] * len(keys)

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.on_set(key, ctx)

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._where:
            self._record((key,), (ctx,), True, None)

    def on_hit_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> None:
        """The resident keys' hits in one ledger call (unknown keys are ignored, as ``on_hit``
        does)."""
        tracked = self._where.contains_many(keys)
        if all(tracked):
            keys = keys if isinstance(keys, list | tuple) else list(keys)
            ctxs = ctxs if isinstance(ctxs, list | tuple) else list(ctxs)
        else:
            keys, ctxs = list(compress(keys, tracked)), list(compress(ctxs, tracked))
        if keys:
            self._record(keys, ctxs, True, None)

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
                c = self._c
                if prio > c.floor:
                    c.floor = prio
                if c.full_tick < 0:
                    c.full_tick = c.tick
                return key
            heapq.heappop(heap)
            del runs[rid]
            if rid == self._c.last_rid:
                self._c.last_key = None
                self._c.last_run_alive = False
        return None

    def _requeue(self, key: str) -> None:
        """A pinned page came up for eviction: it goes back as if just accessed, with the
        highest value any class has (a pin outlasts one trip through the cache)."""
        c = self._c
        rid = c.next_rid
        c.next_rid = rid + 1
        self._runs[rid] = [key]
        self._where[key] = rid
        self._slots += 1
        heapq.heappush(self._heap, (c.floor + float(self._v.max()), c.epoch << 24, rid, c.floor, -1))
        c.last_key = None

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
