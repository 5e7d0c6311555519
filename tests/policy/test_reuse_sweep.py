"""The reuse policy's run lists are swept a few entries per access, never all at once: the sweep
must change no victim, keep the lists bounded under re-reads, and leave no heap entry behind
for long in a cache that does not evict."""

from __future__ import annotations

import random

import pytest

from hicache_mooncake.tiers.policy import reuse
from hicache_mooncake.tiers.policy.contexts import get_contexts, set_contexts
from hicache_mooncake.tiers.policy.reuse import ReusePolicy


def _key(i: int) -> str:
    return f"model/abcd/{i:064x}@tp0of1"


def _workload(
    pol: ReusePolicy, capacity: int | None, steps: int, seed: int, sets: float, check: bool = False
) -> list[str]:
    """Chains of new keys set (a share ``sets`` of the calls), chains of earlier keys read (mostly
    recent ones, as hot prefixes are), victims evicted at ``capacity``; returns the victims in
    order. Re-reads leave stale run entries behind (the page moved to the reader's run)."""
    rng = random.Random(seed)
    victims: list[str] = []
    written = 0
    last: list[str] = []
    for _ in range(steps):
        n = rng.randint(1, 40)
        if last and rng.random() < 0.03:  # a tier dropped the previous call's pages
            for key in last:
                pol.on_remove(key)
        if written < 200 or rng.random() < sets:
            keys = [_key(i) for i in range(written, written + n)]
            # a request's next pages continue its chain (SGLang's prefix_keys) or start a new one
            prev = _key(written - 1) if written and rng.random() < 0.5 else None
            written += n
            for key, ctx in zip(keys, set_contexts(keys, 0 if prev is None else 8, prev, 4096), strict=True):
                pol.on_set(key, ctx)
                while capacity is not None and len(pol) > capacity:
                    victim = pol.pop_victim()
                    assert victim is not None
                    victims.append(victim)
        else:
            start = max(0, written - n - int(written * rng.random() ** 3))
            keys = [_key(i) for i in range(start, start + n)]
            for key, ctx in zip(keys, get_contexts(keys, 4096, n), strict=True):
                pol.on_hit(key, ctx)
        last = keys
        if check:
            # the lists stay near twice the residents (the most there were: removed pages' entries
            # stay until a sweep passes them)
            assert pol._slots <= 2.05 * pol._c.peak + reuse._SLACK + reuse._SWEEP_STEP
    assert pol._slots == sum(len(keys) for keys in pol._runs.values())
    return victims


def test_sweeping_changes_no_victim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Victims with a sweep every few hundred accesses are those of a policy that never sweeps
    (a sweep only drops what eviction would skip: stale entries, runs with no live key)."""
    monkeypatch.setattr(reuse, "_SLACK", 1 << 40)
    unswept = ReusePolicy()
    expected = _workload(unswept, 1500, 8000, seed=11, sets=0.06)
    assert unswept._slots > 3 * len(unswept)  # stale entries piled up: there was work to sweep

    monkeypatch.setattr(reuse, "_SLACK", 64)
    monkeypatch.setattr(reuse, "_SWEEP_STEP", 32)
    swept = ReusePolicy()
    assert _workload(swept, 1500, 8000, seed=11, sets=0.06, check=True) == expected
    assert len(expected) > 3000 and swept._slots < unswept._slots / 2


def test_no_access_sweeps_more_than_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each access looks at no more than ``_SWEEP_STEP`` runs plus one run's entries (a batch:
    that per access): the whole pass is spread over many accesses instead of stalling one."""
    monkeypatch.setattr(reuse, "_SLACK", 64)
    monkeypatch.setattr(reuse, "_SWEEP_STEP", 16)
    looked: list[int] = []
    real_sweep = ReusePolicy._sweep

    def sweep(self: ReusePolicy, budget: int) -> None:
        before = self._sweep_at
        real_sweep(self, budget)
        looked.append(self._sweep_at - before)  # runs visited (each costs the step 1 + its entries)

    monkeypatch.setattr(ReusePolicy, "_sweep", sweep)
    pol = ReusePolicy()
    _workload(pol, 1000, 6000, seed=5, sets=0.05, check=True)
    assert len(looked) > 500
    assert 1 <= max(looked) <= reuse._SWEEP_STEP


def test_a_cache_that_never_evicts_keeps_its_heap_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without evictions the heap entries of swept runs never come up; they are dropped when they
    outnumber the runs, and every resident key is still evicted once when asked."""
    monkeypatch.setattr(reuse, "_SLACK", 256)
    pol = ReusePolicy()
    _workload(pol, None, 3000, seed=3, sets=0.1, check=True)
    assert len(pol._heap) <= 2 * len(pol._runs) + reuse._SLACK + 2 * reuse._SWEEP_STEP
    residents = set(pol._where)
    drained = []
    while (victim := pol.pop_victim()) is not None:
        drained.append(victim)
    assert sorted(drained) == sorted(residents) and len(pol) == 0


def test_a_set_is_classed_new_rewrite_or_hit_from_one_probe() -> None:
    """A set of a key never seen opens a ``_NEW`` observation; of a key observed within the
    horizon but not resident (removed, evicted) a ``_REWRITE``; of a resident key a ``_HIT``. The
    observations are probed once per set, so the class is settled inside that probe."""
    pol = ReusePolicy()
    (ctx,) = set_contexts(["k"], 0, None, 4096)  # one page: a request's tail, length 1, no prefix

    def cls(kind: int) -> int:
        return reuse._KIND_BASE[kind * 2 + 1] + reuse._LP[1][0]

    def observed() -> int:
        value = pol._log.value(hash("k"))
        assert value is not None
        return value & reuse._CLS_MASK

    pol.on_set("k", ctx)
    assert observed() == cls(reuse._NEW)
    pol.on_remove("k")
    pol.on_set("k", ctx)
    assert observed() == cls(reuse._REWRITE)
    pol.on_set("k", ctx)
    assert observed() == cls(reuse._HIT)
    # one observation open, counted in its class (a count left in another would skew the estimates)
    assert [c for c, n in enumerate(pol._open_n) if n] == [cls(reuse._HIT)] and len(pol._log) == 1
    assert pol._pos[cls(reuse._NEW)] == 1.0 and pol._pos[cls(reuse._REWRITE)] == 1.0  # reuses closed
