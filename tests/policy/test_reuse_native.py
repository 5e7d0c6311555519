"""The reuse policy's per-access bookkeeping runs in one native call per batch
(``native.ReuseLedger``); its decisions must be exactly those of the policy as it ran access by
access in Python (``reuse_reference.RefReusePolicy``, the reference model).

Seeded random sequences drive both with the same calls: chains of sets (new keys, re-writes of
removed keys, promoted keys), re-reads of hit runs (with keys that are not resident), single
calls and batches, removals, evictions, hints (sessions, shared keys, pins) and clears, with
parameters that make the guard's tests and the class-value refreshes come often and in the
middle of batches. After every call the two must agree on the victims, the residents, the runs'
live contents, the heap's live entries, the learned values and the guard's state."""

from __future__ import annotations

import random

import pytest

from hicache_mooncake.tiers.policy.base import AccessContext
from hicache_mooncake.tiers.policy.contexts import get_contexts, set_contexts
from hicache_mooncake.tiers.policy.hints import Hints, ManualClock
from hicache_mooncake.tiers.policy.reuse import ReusePolicy

from .reuse_reference import RefReusePolicy


def _key(i: int) -> str:
    return f"model/ab/{i:040x}@tp0of1" if i % 7 else f"modèle/{i}"  # some non-ASCII keys


def _live_runs(where: dict[str, int], runs: dict[int, list[str]]) -> dict[int, list[str]]:
    live = {rid: [k for k in keys if where.get(k) == rid] for rid, keys in runs.items()}
    return {rid: keys for rid, keys in live.items() if keys}


def _state(pol: ReusePolicy | RefReusePolicy) -> dict[str, object]:
    live = _live_runs(pol._where, pol._runs)
    if isinstance(pol, ReusePolicy):
        c = pol._c
        scalars = (
            c.tick, c.epoch, c.peak, c.obs_limit, c.far, c.zs, c.zq, c.zh, c.floor,
            c.full_tick, c.warm_until, c.next_rid, c.real_hits, c.sh_hits, bool(c.sh_broken),
        )  # fmt: skip
        counters = (pol._pos.tolist(), pol._expo.tolist(), pol._open_n.tolist(), pol._open_sum.tolist())
        values = pol._v.tolist()
    else:
        scalars = (
            pol._tick, pol._epoch, pol._peak, pol._obs_limit, pol._far, pol._zs, pol._zq, pol._zh,
            pol._floor, pol._full_tick, pol._warm_until, pol._next_rid, pol._real_hits,
            pol._sh_hits, pol._sh_broken,
        )  # fmt: skip
        counters = (pol._pos, pol._expo, pol._open_n, pol._open_sum)
        values = list(pol._v)
    return {
        "where": dict(pol._where),
        "runs": live,
        "heap": sorted(e for e in pol._heap if e[2] in live),
        "scalars": scalars,
        "counters": counters,
        "values": values,
        "p": list(pol._p),
        "alpha": pol.alpha,
        "far_share": pol.far_share,
        "observations": pol.observations(),
        "lru_until": pol._lru_until,
        "hold": pol._hold,
    }


def _drive(seed: int, steps: int, params: dict[str, object], capacity: int, hinted: bool) -> int:
    rng = random.Random(seed)
    ref, nat = RefReusePolicy(**params), ReusePolicy(**params)  # type: ignore[arg-type]
    clock = ManualClock()
    hints = Hints(clock=clock) if hinted else None
    ref.use_hints(hints)
    nat.use_hints(hints)
    written = 0
    victims = 0
    for step in range(steps):
        r = rng.random()
        n = rng.choice((1, 1, 2, 5, 16, 40, 128))
        if r < 0.45 or written < 50:  # a set call: new keys, or re-writes of earlier ones
            if rng.random() < 0.7:
                keys = [_key(i) for i in range(written, written + n)]
                written += n
            else:
                start = rng.randrange(max(1, written))
                keys = list(dict.fromkeys(_key(i) for i in range(start, min(written, start + n))))
            prefix = rng.choice((0, 0, 3, 17, 200))
            prev = _key(rng.randrange(written)) if prefix and written else None
            ctxs = set_contexts(keys, prefix, prev, 4096)
            if rng.random() < 0.1:
                ctxs = [c._replace(promoted=True) for c in ctxs]
            if rng.random() < 0.3:
                for key, ctx in zip(keys, ctxs, strict=True):
                    assert nat.on_set(key, ctx) == ref.on_set(key, ctx)
            else:
                assert nat.on_set_batch(keys, ctxs) == ref.on_set_batch(keys, ctxs)
        elif r < 0.75:  # a read of a hit run, some keys perhaps not resident
            start = max(0, written - n - int(written * rng.random() ** 3))
            keys = [_key(i) for i in range(start, start + n)]
            ctxs = get_contexts(keys, 4096, rng.choice((0, n, n + 30)))
            if rng.random() < 0.3:
                for key, ctx in zip(keys, ctxs, strict=True):
                    nat.on_hit(key, ctx)
                    ref.on_hit(key, ctx)
            else:
                nat.on_hit_batch(keys, ctxs)
                ref.on_hit_batch(keys, ctxs)
        elif r < 0.8 and written:
            key = _key(rng.randrange(written))
            nat.on_remove(key)
            ref.on_remove(key)
        elif r < 0.83 and hints is not None and written:
            chosen = [_key(rng.randrange(written)) for _ in range(rng.randint(1, 30))]
            what = rng.randrange(4)
            if what == 0:
                hints.open_session(f"s{step}", chosen)
            elif what == 1:
                hints.close_session(f"s{rng.randrange(step + 1)}", chosen)
            elif what == 2:
                hints.mark_shared(chosen, 5.0)
            else:
                hints.pin(chosen, 3.0)
            clock.now += rng.random()
        elif r < 0.832:
            nat.clear()
            ref.clear()
        while len(ref) > capacity:
            victim = ref.pop_victim()
            assert nat.pop_victim() == victim
            victims += 1
        assert len(nat) == len(ref)
        if step % 25 == 0 or step == steps - 1:
            assert _state(nat) == _state(ref), f"step {step}"
    return victims


@pytest.mark.parametrize(
    "seed,params,capacity,hinted",
    [
        (1, {}, 300, False),
        (2, {"adapt_every": 64, "warm": 0.5, "z": 0.5, "margin": 0.0}, 200, False),
        (3, {"adapt_every": 32, "far_lru": 0.0, "far_steep": 0.2, "steep": 3.0}, 150, True),
        (4, {"guard": False, "adaptive": False, "alpha": 2.0, "decay": 1.0}, 250, True),
        (5, {"horizon": 0.5, "adapt_every": 16, "z": 0.0, "margin": 0.0}, 120, False),
    ],
)
def test_native_ledger_decides_as_the_python_reference(
    seed: int, params: dict[str, object], capacity: int, hinted: bool
) -> None:
    assert _drive(seed, 1500, params, capacity, hinted) > 1000  # evictions happened throughout


def test_refresh_and_adapt_land_inside_batches() -> None:
    """Batches of 128 keys cross the refresh ticks (every 1024 accesses) and the guard's test
    ticks mid-batch; the resumed batch must still agree with the per-access reference."""
    ref, nat = RefReusePolicy(adapt_every=50), ReusePolicy(adapt_every=50)
    for b in range(60):
        keys = [_key(b * 100 + i) for i in range(128)]  # overlapping: re-writes of resident keys
        ctxs = set_contexts(keys, 0, None, 4096)
        nat.on_set_batch(keys, ctxs)
        ref.on_set_batch(keys, ctxs)
        gets = get_contexts(keys[:64], 4096, 128)
        nat.on_hit_batch(keys[:64], gets)
        ref.on_hit_batch(keys[:64], gets)
        while len(ref) > 900:
            assert nat.pop_victim() == ref.pop_victim()
    assert nat._c.tick == 60 * 192 and nat._c.next_refresh > 1024
    assert _state(nat) == _state(ref)


def test_bad_arguments_record_nothing() -> None:
    """A batch with a bad key or context is refused by name before any access is recorded."""
    pol = ReusePolicy()
    keys = ["a", "b", "c"]
    ctxs = set_contexts(keys, 0, None, 4096)
    pol.on_set_batch(keys, ctxs)
    before = _state(pol)
    news: list[tuple[int, int, float, int, float, int]] = []
    c = pol._c
    with pytest.raises(TypeError, match=r"keys\[1\] must be a str"):
        c.access(["x", 7, "y"], ctxs, 0, 0, False, b"\0\0\0", None, news, 3)
    with pytest.raises(TypeError, match=r"ctxs\[2\] must be an AccessContext"):
        c.access(["x", "y", "z"], [*ctxs[:2], (1, 2)], 0, 0, False, b"\0\0\0", None, news, 3)
    with pytest.raises(ValueError, match=r"ctxs\[0\]\.position"):
        c.access(["x"], [AccessContext(position=-1)], 0, 0, False, b"\0", None, news, 3)
    with pytest.raises(TypeError, match=r"ctxs\[0\]\.prev_key must be a str or None"):
        c.access(["x"], [AccessContext(prev_key=5)], 0, 0, False, b"\0", None, news, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"hints\[0\] = 9 is not a hint state"):
        c.access(["x"], ctxs[:1], 0, 0, False, b"\0", b"\x09", news, 3)
    with pytest.raises(ValueError, match="in_where holds 2 flags for 3 keys"):
        c.access(["x", "y", "z"], ctxs, 0, 0, False, b"\0\0", None, news, 3)
    with pytest.raises(ValueError, match="no access of index 0 is waiting at stage 2"):
        c.access(["x"], ctxs[:1], 0, 2, False, b"\0", None, news, 3)
    assert news == [] and _state(pol) == before


def test_the_ledger_refuses_arrays_it_cannot_borrow() -> None:
    import numpy as np

    from hicache_mooncake.native import RecencyLog, ReuseLedger
    from hicache_mooncake.tiers.policy import reuse

    n = reuse._N_CLASSES
    args = [np.zeros(n), np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64), np.ones(n)]
    tables = (
        reuse._KIND_BASE_ARRAY,
        reuse._LP_ARRAY,
        reuse._LP_COLS,
        reuse._REWRITE_SHIFT,
        4.0,
        2.0,
        True,
        8,
    )
    ReuseLedger(RecencyLog(reuse._CLS_BITS), *args, *tables)  # as the policy makes it
    bad = list(args)
    bad[1] = np.zeros(n, np.float32)
    with pytest.raises(ValueError, match="expo must be a writable float64 array"):
        ReuseLedger(RecencyLog(reuse._CLS_BITS), *bad, *tables)
    bad = list(args)
    bad[4] = np.ones(n - 1)
    with pytest.raises(ValueError, match="v must be a writable float64 array of"):
        ReuseLedger(RecencyLog(reuse._CLS_BITS), *bad, *tables)
    with pytest.raises(ValueError, match="pos must hold 1 to 2\\*\\*payload_bits classes"):
        ReuseLedger(RecencyLog(4), *args, *tables)  # more classes than the log's payload holds
    frozen = np.ones(n)
    frozen.setflags(write=False)
    with pytest.raises((ValueError, BufferError)):
        ReuseLedger(RecencyLog(reuse._CLS_BITS), *args[:4], frozen, *tables)
