"""Keys are fingerprinted once per store call (``tiers/tier.py``: the optional ``fps`` of
``contains_batch`` / ``remove_batch``): the tiers answer with the caller's fingerprints as they
do with their own, a fingerprint that does not belong to its key can only make a miss (the DRAM
tier checks the full key it keeps per slot), and the store's existence views (which now
fingerprint once and hand each tier the fingerprints of the keys it asks) answer as before, with
forced collisions too."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from itertools import combinations
from typing import Any

import numpy as np
import pytest
from small_stores import small_stores

from hicache_mooncake.native import fingerprint, fingerprints, set_test_fingerprint_mask
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT

PAGE = 16 << 10
MiB = 1 << 20


@pytest.fixture
def colliding() -> Iterator[None]:
    set_test_fingerprint_mask(0x7)  # eight fingerprints for every key
    try:
        yield
    finally:
        set_test_fingerprint_mask(0)


def page(key: str) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def put_dram(tier: DramTier, keys: list[str]) -> list[bool]:
    return tier.put_batch([(k, [memoryview(page(k))], DEFAULT_CONTEXT) for k in keys])


@pytest.fixture
def dram() -> Iterator[DramTier]:
    tier = DramTier(4 * MiB, MiB, prefault=False)
    yield tier
    tier.close()


@pytest.fixture
def make_store(tmp_path: Any) -> Iterator[Any]:
    for make in small_stores(tmp_path):  # one pass: a DRAM tier of 1 MiB over the SSD tier
        yield partial(make, dram_mib=1)


def test_dram_answers_with_the_callers_fingerprints_as_with_its_own(dram: DramTier) -> None:
    keys = [f"model/page-{i:03d}" for i in range(12)]
    assert all(put_dram(dram, keys[::2]))
    asked = keys + ["never-stored", keys[4]]
    expected = [i % 2 == 0 for i in range(12)] + [False, True]
    assert dram.contains_batch(asked) == expected
    assert dram.contains_batch(asked, fingerprints(asked)) == expected
    assert dram.remove_batch(keys[:4], fingerprints(keys[:4])) == 2
    assert dram.contains_batch(keys[:6], fingerprints(keys[:6])) == [False] * 4 + [True, False]


def test_a_fingerprint_that_is_not_the_keys_own_is_a_miss_never_a_hit_or_a_removal(dram: DramTier) -> None:
    """The tier trusts the key, not the fingerprint: handed the fingerprint of a stored key for a
    key it does not hold, it answers a miss and removes nothing."""
    assert put_dram(dram, ["stored"]) == [True]
    wrong = fingerprints(["stored"])
    assert dram.contains_batch(["other"], wrong) == [False]
    assert dram.remove_batch(["other"], wrong) == 0
    assert dram.contains_batch(["stored"]) == [True]


def test_ssd_engine_answers_with_the_callers_fingerprints(make_store: Any) -> None:
    store = make_store()
    ssd = store.ssd
    keys = [f"model/page-{i:03d}" for i in range(6)]
    assert all(ssd.put_batch([(k, [memoryview(page(k))], DEFAULT_CONTEXT) for k in keys[:3]]))
    assert ssd.contains_batch(keys, fingerprints(keys)) == [True] * 3 + [False] * 3
    assert ssd.contains_batch(keys) == [True] * 3 + [False] * 3


def test_store_lookups_fingerprint_once_and_answer_as_before(make_store: Any) -> None:
    store = make_store()
    keys = [f"model/page-{i:03d}" for i in range(80)]  # more than DRAM's 64 pages: some on SSD only
    for i in range(0, len(keys), 8):
        chunk = keys[i : i + 8]
        assert all(store.put_batch(chunk, [[memoryview(page(k))] for k in chunk]))
        assert store.flush()
    where = store.where_batch(keys + ["absent"])
    assert "ssd" in where and "dram" in where and where[-1] is None
    assert store.contains_batch(keys + ["absent"]) == [True] * 80 + [False]
    assert store.exists_batch(["absent", *keys[:3]]) == [False, True, True, True]


def test_a_collision_in_the_store_lookups_is_a_miss_in_dram_never_anothers_bytes(
    make_store: Any, colliding: None
) -> None:
    """Under forced collisions the lookups still hand each tier the fingerprints of its own keys:
    a key whose fingerprint a DRAM page holds is not found in DRAM, and a get of it is a miss."""
    candidates = [f"model/page-{i:03d}" for i in range(32)]
    first, second = next((a, b) for a, b in combinations(candidates, 2) if fingerprint(a) == fingerprint(b))
    store = make_store()
    assert store.put_batch([first], [[memoryview(page(first))]]) == [True]
    assert store.where_batch([first, second]) == ["dram", None]
    buf = np.zeros(PAGE, np.uint8)
    assert store.get_batch_into([second], [[memoryview(buf)]]) == [False]
    assert not buf.any()


def test_ssd_read_counts_are_kept_per_fingerprint_and_forgotten_with_the_key(make_store: Any) -> None:
    """The SSD tier's read counts (``promote_min_hits``) live in a native table keyed by the keys'
    fingerprints: a read counts once per page read (twice in one call: twice), a removal with the
    caller's fingerprints forgets the count, and a key never read is not hot."""
    ssd = make_store().ssd
    ssd.promote_min_hits = 2
    keys = ["hot", "warm", "cold"]
    assert all(ssd.put_batch([(k, [memoryview(page(k))], DEFAULT_CONTEXT) for k in keys]))

    def read(*asked: str) -> list[bool]:
        bufs = [np.zeros(PAGE, np.uint8) for _ in asked]
        return ssd.get_batch_into(
            [(k, [memoryview(b)], DEFAULT_CONTEXT) for k, b in zip(asked, bufs, strict=True)]
        )

    assert read("hot", "hot", "warm") == [True, True, True]
    assert read("absent") == [False]
    hot = [ssd.should_promote(k, DEFAULT_CONTEXT) for k in (*keys, "absent")]
    assert hot == [True, False, False, False]
    assert ssd.remove_batch(["hot"], fingerprints(["hot"])) == 1
    assert ssd.put_batch([("hot", [memoryview(page("hot"))], DEFAULT_CONTEXT)]) == [True]
    assert not ssd.should_promote("hot", DEFAULT_CONTEXT)  # stored again: its count starts over
    assert read("warm") == [True] and ssd.should_promote("warm", DEFAULT_CONTEXT)
