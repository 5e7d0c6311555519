"""The DRAM tier on the native index: keys are looked up by 64-bit fingerprint and checked against
the full key kept per slot, so a fingerprint collision is a counted miss, never another key's
bytes; and seeded random sequences of set / get / remove / clear answer as the dict-based
reference model (``reference_dram_index``) does, with and without forced collisions."""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import combinations

import numpy as np
import pytest
from reference_dram_index import ReferenceDramIndex

from hicache_mooncake.metrics.tiers import TierStatsCollector
from hicache_mooncake.native import fingerprint, set_test_fingerprint_mask
from hicache_mooncake.tiers.dram_tier import DramTier, header_offset
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT
from hicache_mooncake.transport.object_header import STATE_FREE, STATE_WRITING, ObjectHeader

MiB = 1 << 20
COLLIDING_MASK = 0x7  # eight fingerprints for every key: collisions in every few keys


@pytest.fixture
def colliding() -> Iterator[None]:
    set_test_fingerprint_mask(COLLIDING_MASK)
    try:
        yield
    finally:
        set_test_fingerprint_mask(0)


def value_of(key: str, n: int) -> bytes:
    return np.random.default_rng(abs(hash(key)) % (1 << 32)).integers(0, 256, n, dtype=np.uint8).tobytes()


def put_all(tier: DramTier, pages: list[tuple[str, bytes]], readonly: bool = False) -> list[bool]:
    items = []
    for key, value in pages:
        data = value if readonly else np.frombuffer(bytearray(value), np.uint8)
        cut = len(value) // 3
        items.append((key, [memoryview(data)[:cut], memoryview(data)[cut:]], DEFAULT_CONTEXT))
    return tier.put_batch(items)


def get_all(tier: DramTier, keys: list[str], sizes: list[int]) -> list[bytes | None]:
    outs = [np.zeros(n, np.uint8) for n in sizes]
    items = [
        (k, [memoryview(o)[: n // 2], memoryview(o)[n // 2 :]], DEFAULT_CONTEXT)
        for k, o, n in zip(keys, outs, sizes, strict=True)
    ]
    done = tier.get_batch_into(items)
    return [o.tobytes() if ok else None for o, ok in zip(outs, done, strict=True)]


def colliding_pair() -> tuple[str, str]:
    keys = [f"model-x/tenant/page-{i:04d}" for i in range(32)]
    for a, b in combinations(keys, 2):
        if fingerprint(a) == fingerprint(b):
            return a, b
    raise AssertionError("no two keys share a fingerprint under the test mask")


def test_two_keys_with_one_fingerprint_never_read_each_others_bytes(colliding: None) -> None:
    first, second = colliding_pair()
    tier = DramTier(capacity=4 * MiB, slab_size=MiB)
    try:
        a, b = value_of(first, 20_000), value_of(second, 20_000)
        assert put_all(tier, [(first, a)]) == [True]
        assert put_all(tier, [(second, b)]) == [False]  # its fingerprint is taken: refused
        assert get_all(tier, [first, second], [20_000, 20_000]) == [a, None]
        assert tier.contains_batch([first, second]) == [True, False]
        assert tier.stored_sizes([first, second]).tolist() == [20_000, -1]  # a set's screen
        assert tier.locate([second]) == [None] and tier.pin_entries([second]) == [None]
        assert not tier.remove(second) and tier.contains(first)  # the other key's entry stays
        collisions = tier.stats()["fingerprint_collisions"]
        assert collisions >= 3
        metrics = {
            f.name.split(":")[-1]: f for f in TierStatsCollector(lambda: {"dram": tier.stats()}, {}).collect()
        }
        assert metrics["tier_fingerprint_collisions"].samples[0].value == collisions
        # the other order, in one batch: the first of the batch is stored, the second refused
        assert tier.remove(first)
        assert put_all(tier, [(second, b), (first, a)]) == [True, False]
        assert get_all(tier, [first, second], [20_000, 20_000]) == [None, b]
    finally:
        tier.close()


def test_a_served_reservation_whose_fingerprint_is_taken_is_not_published(colliding: None) -> None:
    first, second = colliding_pair()
    tier = DramTier(capacity=4 * MiB, slab_size=MiB, object_headers=True)
    try:
        assert put_all(tier, [(first, value_of(first, 8192))]) == [True]
        (res,) = tier.reserve([(second, 8192, 0)])
        assert res is not None
        res.body[:] = np.frombuffer(value_of(second, 8192), np.uint8)
        assert tier.publish([res]) == [None]
        (loc,) = tier.locate([first])
        assert loc is not None and tier.stats()["entries"] == 1
    finally:
        tier.close()


def test_publish_flags_answer_what_publish_locates(colliding: None) -> None:
    """A served commit asks ``publish_flags``: True where ``publish`` would locate the key (its
    own slot, or the first value of a key published meanwhile), False for a reservation made
    before a clear and for a fingerprint another key holds; the same slots are freed."""
    first, second = colliding_pair()
    flags = DramTier(capacity=4 * MiB, slab_size=MiB, object_headers=True)
    where = DramTier(capacity=4 * MiB, slab_size=MiB, object_headers=True)
    try:
        for tier in (flags, where):
            assert put_all(tier, [(first, value_of(first, 8192))]) == [True]
        answers = []
        for tier, publish in ((flags, flags.publish_flags), (where, where.publish)):
            old = tier.reserve([("before-clear", 8192, 0)])
            tier.clear()
            assert put_all(tier, [(first, value_of(first, 8192))]) == [True]
            made = tier.reserve([(second, 8192, 0), ("k", 8192, 0), ("k", 8192, 0)])
            for res in made:
                assert res is not None
                res.body[:] = np.frombuffer(value_of(res.key, 8192), np.uint8)
            answers.append(publish([*old, *made]))  # type: ignore[list-item]
        assert answers[0] == [False, False, True, True]
        assert answers[0] == [loc is not None for loc in answers[1]]
        assert flags.stats()["entries"] == where.stats()["entries"] == 2
        assert flags.stats()["used_bytes"] == where.stats()["used_bytes"]
        assert get_all(flags, ["k"], [8192]) == [value_of("k", 8192)]
    finally:
        flags.close()
        where.close()


@pytest.fixture(params=[0, COLLIDING_MASK], ids=["fingerprints", "forced-collisions"])
def mask(request: pytest.FixtureRequest) -> Iterator[int]:
    set_test_fingerprint_mask(request.param)
    try:
        yield request.param
    finally:
        set_test_fingerprint_mask(0)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_sequences_answer_as_the_reference_model(mask: int, seed: int) -> None:
    """Sets (native copies and read-only parts), gets (some at a wrong size), removes of present,
    absent and repeated keys, contains and clears: the tier and the model agree at every step."""
    rng = random.Random(seed)
    tier = DramTier(capacity=8 * MiB, slab_size=MiB)
    model = ReferenceDramIndex(fingerprint)
    pool = [f"ns/{seed}/key-{i}" for i in range(40)]
    size_of = {k: rng.choice([5000, 20_000, 70_000]) for k in pool}
    try:
        for _step in range(300):
            op = rng.random()
            keys = rng.choices(pool, k=rng.randint(1, 12))
            if op < 0.4:
                pages = [(k, value_of(k, size_of[k])) for k in keys]
                want = [model.put(k, v) for k, v in pages]
                assert put_all(tier, pages, readonly=rng.random() < 0.2) == want
            elif op < 0.75:
                sizes = [size_of[k] + (4096 if rng.random() < 0.1 else 0) for k in keys]
                assert get_all(tier, keys, sizes) == [
                    model.get(k, n) for k, n in zip(keys, sizes, strict=True)
                ]
            elif op < 0.85:
                assert tier.contains_batch(keys) == [model.contains(k) for k in keys]
                assert tier.stored_sizes(keys).tolist() == [
                    size_of[k] if model.contains(k) else -1 for k in keys
                ]
            elif op < 0.98:
                assert tier.remove_batch(keys) == sum(model.remove(k) for k in keys)
            else:
                tier.clear()
                model.clear()
            assert set(tier.keys()) == model.keys()
        stats = tier.stats()
        assert stats["entries"] == len(model.keys())
        assert (stats["fingerprint_collisions"] > 0) == bool(mask)
    finally:
        tier.close()


def test_address_based_reads_see_exactly_the_published_bodies_and_headers() -> None:
    """``committed_extent`` (the tcp engine's reads by address) answers from the native index:
    a published object's body and header are readable, the slot past them and a removed
    object's slot are not."""
    tier = DramTier(capacity=2 * MiB, slab_size=MiB, object_headers=True)
    try:
        assert put_all(tier, [("a", value_of("a", 10_000)), ("b", value_of("b", 10_000))]) == [True, True]
        (loc,) = tier.locate(["a"])
        assert loc is not None
        assert tier.committed_extent(loc.offset, 10_000)
        assert tier.committed_extent(loc.header, 64)
        assert not tier.committed_extent(loc.offset, loc.header + 64 - loc.offset + 1)
        assert tier.remove_batch(["a"]) == 1
        assert not tier.committed_extent(loc.offset, 10_000)
    finally:
        tier.close()


def test_a_batch_of_served_slots_carries_the_headers_one_sided_readers_check() -> None:
    """Reserve, publish and remove of a batch write each slot's ``ObjectHeader`` (WRITING, then
    VALID with the key's hash, version, size and type, then FREE) exactly as a one-sided reader
    validates it."""
    tier = DramTier(capacity=4 * MiB, slab_size=MiB, object_headers=True)
    try:
        keys = [f"served/{i}" for i in range(6)]
        res = tier.reserve([(k, 10_000, i % 3) for i, k in enumerate(keys)])
        assert all(r is not None for r in res)

        def header(r_offset: int, nbytes: int) -> ObjectHeader:
            at = header_offset(r_offset, nbytes)
            return ObjectHeader.unpack(bytes(tier.arena_view[tier.wire_offset(at) :][:64]))

        for r in res:
            assert r is not None and header(r.offset, r.nbytes).state == STATE_WRITING
        located = tier.publish([r for r in res if r is not None])
        for key, loc in zip(keys, located, strict=True):
            assert loc is not None and header(loc.offset, loc.nbytes).matches(key, loc.version, 10_000)
        assert tier.remove_batch(keys[:4]) == 4
        for loc in located[:4]:
            assert loc is not None and header(loc.offset, loc.nbytes).state == STATE_FREE
        assert header(located[4].offset, 10_000).matches(keys[4], located[4].version, 10_000)  # type: ignore[union-attr]
    finally:
        tier.close()
