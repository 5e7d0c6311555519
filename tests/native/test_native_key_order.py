"""The native KeyOrder against ``collections.OrderedDict`` (the reference model of the dicts and
ordered dicts it replaces in the placement, the LRU policy and the reuse policy's run map): seeded
random operation streams over str and int keys, some ints sharing their Python hash, growth and
shrinking, and the batch calls (all or nothing where they refuse)."""

from __future__ import annotations

import random
import sys
from collections import OrderedDict
from typing import Any

import pytest

from hicache_mooncake.native import KeyOrder

_MODULUS = sys.hash_info.modulus  # ints k and k + modulus have one hash: collisions on demand


def _key_pool(rng: random.Random, n: int) -> list[Any]:
    """strs and ints, a third of the ints sharing their hash with another pool key."""
    keys: list[Any] = [f"model/d/{rng.getrandbits(64):016x}@tp0of1" for _ in range(n // 2)]
    ints = [rng.randrange(1 << 40) for _ in range(n // 2)]
    keys += ints + [i + _MODULUS for i in ints[: n // 6]] + [-1, -2]  # hash(-1) == hash(-2)
    return keys


def _fresh_copy(key: Any) -> Any:
    """An equal key that is another object (lookups must compare, not only match identity)."""
    return (key + "!")[:-1] if isinstance(key, str) else int(str(key))


def _same(ko: KeyOrder, od: OrderedDict[Any, int]) -> None:
    assert len(ko) == len(od)
    assert ko.items() == list(od.items())
    assert list(ko) == list(od)
    assert ko.values() == list(od.values())


def _step(rng: random.Random, ko: KeyOrder, od: OrderedDict[Any, int], pool: list[Any]) -> None:
    op = rng.randrange(13)
    key = rng.choice(pool)
    probe = _fresh_copy(key) if rng.random() < 0.5 else key
    if op == 0:
        value = rng.randrange(-5, 1 << 40)
        ko[probe] = value
        od[key] = value
    elif op == 1:
        assert (probe in ko) == (key in od)
        assert ko.get(probe, "none") == od.get(key, "none")
    elif op == 2:
        assert ko.pop(probe, None) == od.pop(key, None)
    elif op == 3 and od:
        last = rng.random() < 0.5
        assert ko.popitem(last) == od.popitem(last)
    elif op == 4 and key in od:
        last = rng.random() < 0.7
        ko.move_to_end(probe, last)
        od.move_to_end(key, last)
    elif op == 5:
        batch = rng.sample(pool, rng.randrange(0, 40))
        if rng.random() < 0.2 and batch:
            batch.append(batch[0])  # a repeat: nothing may change
        fresh = not any(k in od for k in batch) and len(set(batch)) == len(batch)
        values = [rng.randrange(1, 1 << 20) for _ in batch]
        assert ko.add_new([_fresh_copy(k) for k in batch], values) is fresh
        if fresh:
            od.update(zip(batch, values, strict=True))
    elif op == 6:
        batch = rng.sample(pool, rng.randrange(0, 20))
        present = all(k in od for k in batch)
        assert ko.touch_many(batch) is present
        if present:
            for k in batch:
                od.move_to_end(k)
    elif op == 7:
        batch = rng.sample(pool, rng.randrange(0, 30))
        assert ko.contains_many(batch) == [k in od for k in batch]
        assert ko.any_in(batch) == any(k in od for k in batch)
    elif op == 8:
        amount = rng.randrange(0, 1 << 22)
        keys, values = ko.pop_oldest(amount)
        want_k, want_v = [], []
        while od and amount > 0:
            k, v = od.popitem(last=False)
            want_k.append(k)
            want_v.append(v)
            amount -= v
        assert (keys, values) == (want_k, want_v)
    elif op == 9 and key in od:
        del ko[probe]
        del od[key]
    elif op == 10:
        limit = rng.randrange(0, 50)
        assert ko.newest(limit) == list(reversed(od.items()))[:limit]
    elif op == 12:
        batch = [rng.choice(pool) for _ in range(rng.randrange(0, 30))]  # repeats allowed
        value: int | list[int] = (
            rng.randrange(1 << 20) if rng.random() < 0.5 else [rng.randrange(9) for _ in batch]
        )
        ko.put_many([_fresh_copy(k) for k in batch], value)
        od.update(zip(batch, value if isinstance(value, list) else [value] * len(batch), strict=True))
    elif op == 11 and rng.random() < 0.02:
        ko.clear()
        od.clear()


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_an_ordered_dict(seed: int) -> None:
    rng = random.Random(seed)
    pool = _key_pool(rng, 300)
    ko, od = KeyOrder(), OrderedDict[Any, int]()
    for i in range(6000):
        _step(rng, ko, od, pool)
        if i % 500 == 0:
            _same(ko, od)
    _same(ko, od)


def test_growth_past_many_index_rebuilds_and_back_keeps_every_key() -> None:
    ko, od = KeyOrder(), OrderedDict[Any, int]()
    keys = [f"k{i}" for i in range(50_000)]
    for start in range(0, len(keys), 128):
        batch = keys[start : start + 128]
        assert ko.add_new(batch, list(range(start, start + len(batch))))
        od.update(zip(batch, range(start, start + len(batch)), strict=True))
    _same(ko, od)
    assert ko.values_of(keys[::997]) == [od[k] for k in keys[::997]]
    for key in keys[::2]:  # every other removal: the backward shifts keep the rest findable
        assert ko.pop(key) == od.pop(key)
    _same(ko, od)
    assert all(ko.contains_many(keys[1::2]))
    assert ko.nbytes() > 0


def test_colliding_ints_are_told_apart() -> None:
    ko = KeyOrder()
    keys = [7 + i * _MODULUS for i in range(40)]  # one hash for all 40
    assert ko.add_new(keys, list(range(40)))
    assert [ko[k] for k in keys] == list(range(40))
    for k in keys[::3]:
        del ko[k]
    assert [ko.get(k) for k in keys] == [None if i % 3 == 0 else i for i in range(40)]


def test_batch_calls_change_nothing_when_refused() -> None:
    ko = KeyOrder()
    assert ko.add_new(["a", "b"], 1)
    before = ko.items()
    assert ko.add_new(["c", "a"], 1) is False  # one present
    assert ko.add_new(["c", "d", "c"], 1) is False  # a repeat within the batch
    assert ko.touch_many(["a", "zz"]) is False  # one absent
    assert ko.items() == before
    with pytest.raises(ValueError, match="values"):
        ko.add_new(["c"], [1, 2])
    with pytest.raises(TypeError):
        ko.add_new(["c", 3.5], 1)
    with pytest.raises(TypeError):
        ko.put_many(["c", None], 1)
    with pytest.raises(TypeError):
        ko.put_many(["c", "d"], [1, "x"])
    assert ko.items() == before


def test_keys_of_other_types_are_refused_on_insert_and_missed_on_lookup() -> None:
    ko = KeyOrder()
    with pytest.raises(TypeError, match="str or int"):
        ko[("a", 1)] = 1
    with pytest.raises(TypeError, match="str or int"):
        ko[b"a"] = 1
    assert (b"a" in ko) is False
    assert ko.get(1.0) is None
    with pytest.raises(KeyError):
        ko.popitem()
    with pytest.raises(KeyError):
        ko.move_to_end("absent")
    with pytest.raises(KeyError):
        ko.values_of(["absent"])


def test_values_whose_index_changes_their_list_are_refused_and_change_nothing() -> None:
    class Shrinking:
        """An int-like value whose conversion empties the list it came in."""

        def __init__(self, values: list[Any]) -> None:
            self.values = values

        def __index__(self) -> int:
            self.values.clear()
            return 1

    ko = KeyOrder()
    ko["a"] = 5
    values: list[Any] = [0, 0]
    values[0] = Shrinking(values)
    with pytest.raises(ValueError, match="changed while they were read"):
        ko.put_many(["x", "y"], values)
    assert ko.items() == [("a", 5)]
