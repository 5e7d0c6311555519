"""The native RecencyLog against the two ordered dicts it replaces (the reference model), on
random and adversarial access streams, with compaction passes spread over few accesses."""

from __future__ import annotations

import random
import tracemalloc
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
from gil_probe import progress_during

from hicache_mooncake.native import RecencyLog

BITS = 10


class _Reference:
    """The reuse policy's former bookkeeping: observations and the LRU shadow as OrderedDicts."""

    def __init__(self) -> None:
        self.obs: OrderedDict[Any, int] = OrderedDict()
        self.shadow: OrderedDict[Any, None] = OrderedDict()

    def touch(
        self, fp: Any, tick: int, payload: int, shadow_size: int, limit: int
    ) -> tuple[int | None, bool, int | None]:
        old = self.obs.pop(fp, None)
        self.obs[fp] = (tick << BITS) | payload
        expired = self.obs.popitem(last=False)[1] if len(self.obs) > limit else None
        was = fp in self.shadow
        if was:
            self.shadow.move_to_end(fp)
        else:
            self.shadow[fp] = None
            if len(self.shadow) > shadow_size:
                self.shadow.popitem(last=False)
        return old, was, expired


def _stream(rng: random.Random, n: int, keys: int, hot: int) -> list[int]:
    """Mostly a few hot keys (stale log entries pile up: compaction), then scans of new keys
    (expiry and the shadow's boundary move), mixed."""
    out: list[int] = []
    fresh = keys
    while len(out) < n:
        mode = rng.random()
        if mode < 0.4:
            out.extend(rng.randrange(hot) for _ in range(rng.randrange(1, 400)))
        elif mode < 0.7:
            out.extend(range(fresh, fresh + rng.randrange(1, 300)))
            fresh += 300
        else:
            out.extend(rng.randrange(keys) for _ in range(rng.randrange(1, 300)))
    return out[:n]


@pytest.mark.parametrize("passes", ["whole", "spread"])
@pytest.mark.parametrize("seed", range(6))
def test_the_log_answers_exactly_as_the_two_ordered_dicts(seed: int, passes: str) -> None:
    """``spread``: compaction passes of a few entries every few accesses, from a small slack, so
    passes run across expiries, head drops and shadow moves (and several per run)."""
    make = (lambda: RecencyLog(BITS, 64, 16, 3)) if passes == "spread" else (lambda: RecencyLog(BITS))
    rng = random.Random(seed)
    log, ref = make(), _Reference()
    shadow_size = rng.randrange(1, 50)
    universe = 1500 if seed % 2 else 10**9  # few distinct keys: stale entries pile up
    stream = _stream(rng, 40_000, keys=3000, hot=rng.randrange(1, 40))
    for tick, fp in enumerate((fp % universe + 1 for fp in stream), start=1):  # hash() is never 0 here
        if rng.random() < 0.0005:
            shadow_size += rng.randrange(0, 100)  # the shadow grows with the peak, never shrinks
        # the policy keeps limit >= shadow size; a large one lets stale entries pile up (compaction)
        limit = shadow_size + (10**6 if seed % 2 else rng.choice((0, 5, 1024)))
        payload = rng.randrange(1 << BITS)
        assert log.touch(fp, tick, payload, shadow_size, limit) == ref.touch(
            fp, tick, payload, shadow_size, limit
        ), f"tick {tick} key {fp}"
        assert len(log) == len(ref.obs) and log.shadow_len == len(ref.shadow)
        if tick % 997 == 0:  # the log holds each observation's latest access, in order
            assert log.live_fingerprints() == list(ref.obs)
    assert all(fp in log for fp in ref.obs)
    assert not any(fp in log for fp in range(10**9, 10**9 + 100))
    assert passes == "whole" or log.passes_done >= 10


def test_hot_keys_do_not_grow_the_log_without_bound() -> None:
    log = RecencyLog(BITS)
    for tick in range(1, 200_000):
        log.touch(tick % 7 + 1, tick, 0, 5, 10_000)  # shadow 5, limit 10k
    assert len(log) == 7 and log.shadow_len == 5
    assert log.log_len < 2 * 7 + 4096 + 2  # compacted as it went


def test_an_observed_key_costs_well_under_the_two_ordered_dicts() -> None:
    """The point of the structure: ~215 bytes per key as two OrderedDicts keyed by the key's
    string, 37-59 here (~125 when the fingerprints were a dict's int keys). The native table's
    memory is outside tracemalloc's view: the log reports its own (``nbytes``), and tracemalloc
    checks that nothing else grows per key on the Python heap."""
    n = 100_000
    keys = [f"model/abcd/{i:064x}@tp0of1" for i in range(n)]

    def cost(structure: Any, key_of: Callable[[str], Any]) -> float:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for tick, key in enumerate(keys, start=1):
                structure.touch(key_of(key), tick, 1, n, 4 * n)
            return (tracemalloc.get_traced_memory()[0] - before) / n
        finally:
            tracemalloc.stop()

    log = RecencyLog(BITS)
    on_the_python_heap = cost(log, hash)
    theirs = cost(_Reference(), lambda key: key)
    ours = log.nbytes / n
    assert on_the_python_heap < 20 and ours < 70 and theirs > 150, (on_the_python_heap, ours, theirs)


def test_a_repeated_access_costs_its_log_entry_only() -> None:
    """A key accessed again leaves a stale log entry until the next compaction: 16 bytes of two
    int64 arrays, no Python object (a list of fingerprints kept the int ``hash(key)`` made for each
    access: ~56 bytes, and every full garbage collection walked that list with the GIL held)."""
    n = 50_000
    keys = [f"model/abcd/{i:064x}@tp0of1" for i in range(n)]
    log = RecencyLog(BITS)
    tracemalloc.start()  # before the first accesses: what the second ones free counts too
    try:
        for tick, key in enumerate(keys, start=1):
            log.touch(hash(key), tick, 1, n, 4 * n)
        before = tracemalloc.get_traced_memory()[0]
        for tick, key in enumerate(keys, start=n + 1):  # 2n entries < 2 * live + slack: no compaction
            log.touch(hash(key), tick, 1, n, 4 * n)  # a fresh int each time, as the policy's call
        per_access = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert per_access < 30, per_access
    assert len(log) == n and all(hash(key) in log for key in keys[:100])


def test_a_limit_below_the_shadow_size_cuts_the_shadow_to_the_observations() -> None:
    log = RecencyLog(BITS)
    for tick in range(1, 101):
        log.touch(tick, tick, 0, 50, 10)  # shadow 50, limit 10
    assert len(log) == 10 and log.shadow_len == 10
    assert log.touch(90, 101, 0, 50, 10)[:2] == (None, False)  # expired: gone from both
    assert log.touch(100, 102, 0, 50, 10)[1] is True


def test_a_key_is_its_hash_taken_as_unsigned_64_bits() -> None:
    """``hash(key)`` may be negative: -5 and 2**64 - 5 are one key; 0 and 1 too (0 marks an empty
    slot in the table)."""
    log = RecencyLog(BITS)
    assert log.touch(-5, 1, 3, 10, 100) == (None, False, None)
    assert log.touch(2**64 - 5, 2, 4, 10, 100) == ((1 << BITS) | 3, True, None)
    log.touch(0, 3, 0, 10, 100)
    assert 1 in log and log.value(1) == 3 << BITS
    assert log.live_fingerprints() == [2**64 - 5, 1]


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((7, 5, 0, 10, 100), ValueError, "ticks must increase: 5 after 5"),
        ((7, 6, 1 << BITS, 10, 100), ValueError, "payload must be below 1024"),
        ((7, 6, 0, 10, 100, 1 << BITS), ValueError, "seen_payload must be below 1024"),
        ((7, 1 << (63 - BITS), 0, 10, 100), ValueError, "tick must be below"),
        (("key", 6, 0, 10, 100), TypeError, "key_hash must be an int"),
        ((7, 6, 0, -1, 100), (ValueError, OverflowError), "shadow_size"),
        ((7, 6), TypeError, "touch"),
    ],
)
def test_bad_touches_raise_and_change_nothing(args: tuple[Any, ...], error: Any, match: str) -> None:
    log = RecencyLog(BITS)
    log.touch(3, 5, 1, 10, 100)
    with pytest.raises(error, match=match):
        log.touch(*args)
    assert len(log) == 1 and log.log_len == 1 and log.shadow_len == 1 and log.live_fingerprints() == [3]
    assert log.touch(3, 6, 2, 10, 100) == ((5 << BITS) | 1, True, None)


def test_constructor_arguments_are_checked() -> None:
    for bad in ((-1,), (49,), (BITS, 0), (BITS, 64, 0), (BITS, 64, 16, 0)):
        with pytest.raises(ValueError):
            RecencyLog(*bad)


def test_a_touch_that_grows_the_table_lets_other_threads_run() -> None:
    """The one growth in a touch (a segment of up to 65536 slots doubled or split: milliseconds)
    runs with the GIL released, as FpTable's does; every other touch keeps it."""
    full = 49_152  # 3/4 of a 65536-slot segment: the next new key splits it
    logs = []
    for _ in range(20):  # one full log per attempt: every call below must grow
        log = RecencyLog(BITS)
        for tick in range(1, full + 1):
            log.touch(tick * 0x9E3779B97F4A7C15, tick, 0, full, 4 * full)
        logs.append(log)
    assert progress_during(lambda: logs.pop().touch(1 << 62, full + 1, 0, full, 4 * full)) > 0
    warm = RecencyLog(BITS)
    ticks = iter(range(1, 100))
    assert progress_during(lambda: warm.touch(5, next(ticks), 0, 10, 100), attempts=5) == 0
