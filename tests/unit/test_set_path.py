"""The store's set path (``tiers/set_path.py``) over a real DRAM tier and a real SSD tier: a set of a
key that is stored already with another size is refused (False, counted, logged once) and leaves
the stored value as it was, wherever it lives; a set of the same size is still True."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from small_stores import small_stores

from hicache_mooncake.tiers.tiered_store import TieredStore

PAGE = 64 << 10
MiB = 1 << 20


def value(key: str, size: int = PAGE) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(size, b"."), dtype=np.uint8).copy()


def put(store: TieredStore, key: str, size: int = PAGE) -> bool:
    (ok,) = store.put_batch([key], [[memoryview(value(key, size))]])
    return ok


def read(store: TieredStore, key: str, size: int = PAGE) -> np.ndarray | None:
    buf = np.zeros(size, np.uint8)
    (ok,) = store.get_batch_into([key], [[memoryview(buf)]])
    return buf if ok else None


@pytest.fixture
def make_store(tmp_path: Any) -> Iterator[Any]:
    yield from small_stores(tmp_path)


@pytest.mark.parametrize("tiers", ["dram+ssd", "dram", "ssd"])
def test_a_set_of_a_stored_key_with_another_size_is_refused_and_the_value_stays(
    make_store: Any, tiers: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(dram="dram" in tiers, ssd="ssd" in tiers)
    assert put(store, "k")
    assert put(store, "k")  # the same size again: stored already, True
    with caplog.at_level(logging.WARNING, logger="hicache_mooncake.tiers.set_path"):
        assert not put(store, "k", PAGE // 2)
        assert not put(store, "k", PAGE * 2 if tiers == "ssd" else PAGE // 4)
    assert store.counts["refused_other_size"] == 2
    assert sum("stored with" in r.getMessage() for r in caplog.records) == 1  # logged once
    got = read(store, "k")
    assert got is not None and np.array_equal(got, value("k"))  # the committed value, unchanged
    assert read(store, "k", PAGE // 2) is None


def test_a_refused_page_of_another_size_leaves_the_rest_of_the_batch_stored(make_store: Any) -> None:
    store = make_store()
    assert put(store, "old")
    keys = ["a", "old", "b"]
    bufs = [value("a"), value("old", PAGE // 2), value("b")]
    assert store.put_batch(keys, [[memoryview(b)] for b in bufs]) == [True, False, True]
    for key in ("a", "old", "b"):
        got = read(store, key)
        assert got is not None and np.array_equal(got, value(key))


def test_a_key_on_ssd_only_with_another_size_is_refused_not_moved_up(make_store: Any) -> None:
    """A page demoted to SSD (DRAM full): the set asks the SSD for its size, refuses, and DRAM
    gets no copy of the other size."""
    store = make_store(dram_mib=1)  # 16 pages of DRAM
    keys = [f"p{i:03d}" for i in range(40)]
    for i in range(0, len(keys), 8):
        assert all(put(store, k) for k in keys[i : i + 8])
        assert store.flush()
    on_ssd = [k for k, where in zip(keys, store.where_batch(keys), strict=True) if where == "ssd"]
    assert on_ssd
    key = on_ssd[0]
    assert not put(store, key, PAGE // 2)
    assert store.counts["refused_other_size"] == 1
    assert store.where_batch([key]) == ["ssd"]
    got = read(store, key)
    assert got is not None and np.array_equal(got, value(key))
