"""The lookup API (``POST /v1/lookup``) as a router meets it, on a real store (DRAM + SSD) behind a
real admin endpoint: per key the tier that holds the page (DRAM, SSD, none) and the leading run
held, the same answers while four threads set and get other pages, a lookup is not a hit (the
eviction order and the store's counters do not move), a page stored as several objects is held
only when all are, and bad requests (block-hash ints, empty lists, no key space, no token) are
refused with what is wrong."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from ops_helpers import small_config
from transport_procs import SECRET

from hicache_mooncake.admin.client import AdminClient, AdminError
from hicache_mooncake.admin.lookup_routes import page_tiers
from hicache_mooncake.keys import KeySpace, RankInfo, build_keyspace
from hicache_mooncake.tiers.tiered_store import TieredStore

PAGE = 256 << 10  # 16 pages fill the 4 MiB DRAM tier of small_config
_DATA = np.zeros(PAGE, np.uint8)


def keyspace() -> KeySpace:
    return build_keyspace("m", "", {"page_size": 64}, "v1", RankInfo())


def mapping(space: KeySpace) -> Any:
    """What the backend passes as ``AdminContext.store_keys``."""
    return lambda hashes, tenant: (space.for_tenant(tenant) if tenant is not None else space).keys(hashes)


def hashes(tag: str, n: int) -> list[str]:
    return [f"{tag}{i:062x}" for i in range(n)]


def put(store: TieredStore, keys: list[str]) -> None:
    assert all(store.put_batch(keys, [[memoryview(_DATA)] for _ in keys]))


def truth(store: TieredStore, keys: list[str]) -> list[str | None]:
    """Where each key is, asked of each tier directly."""
    dram, ssd = store.dram, store.ssd
    assert dram is not None and ssd is not None
    return ["dram" if dram.contains(k) else "ssd" if ssd.contains(k) else None for k in keys]


def lookup_store(tmp_path, stores, admin_for):  # type: ignore[no-untyped-def]
    config = small_config(tmp_path, tiers={"ssd": {"capacity": "32MiB"}})
    store = stores(config)
    space = keyspace()
    return store, space, admin_for(store, config, store_keys=mapping(space))


def test_each_page_is_answered_with_its_tier_and_the_held_prefix(tmp_path, stores, admin_for):
    store, space, admin = lookup_store(tmp_path, stores, admin_for)
    old, new = hashes("a", 16), hashes("b", 8)
    put(store, space.keys(old))
    put(store, space.keys(new))  # DRAM holds 16: the oldest pages are demoted to the SSD
    assert store.flush(30)
    asked = old + new + hashes("c", 4)
    answer = admin.lookup(asked)
    expected = truth(store, space.keys(asked))
    assert answer["tiers"] == expected
    assert {"dram", "ssd"} <= set(expected) and expected[-4:] == [None] * 4
    assert answer["longest_prefix"] == 24
    assert answer["counts"] == {"dram": expected.count("dram"), "ssd": expected.count("ssd")}
    assert answer["asked"] == ["dram", "ssd"] and answer["rank"] == "0"
    hole = admin.lookup([*new[:2], hashes("c", 1)[0], *new[2:]])
    assert hole["longest_prefix"] == 2 and hole["tiers"][2] is None and hole["tiers"][3] is not None
    other = admin.lookup(new, tenant="acme")  # another tenant's keys: none stored
    assert other["tiers"] == [None] * 8 and other["longest_prefix"] == 0


def test_a_lookup_is_not_a_hit(tmp_path, stores, admin_for):
    store, space, admin = lookup_store(tmp_path, stores, admin_for)
    first, second = hashes("a", 4), hashes("b", 6)
    put(store, space.keys(first))
    put(store, space.keys(second))
    before = store.stats()
    for _ in range(5):
        assert admin.lookup(first)["tiers"] == ["dram"] * 4
    after = store.stats()
    assert after["tenants"] == before["tenants"] and after["placement"] == before["placement"]
    assert after["dram"].get("hits") == before["dram"].get("hits")
    put(store, space.keys(hashes("c", 8)))  # LRU: the least recent pages leave DRAM
    assert store.flush(30)
    assert truth(store, space.keys(first)) == ["ssd"] * 4  # the looked-up pages were still the LRU
    assert "dram" in truth(store, space.keys(second))


def test_answers_hold_under_four_threads_of_sets_and_gets(tmp_path, stores, admin_for):
    store, space, admin = lookup_store(tmp_path, stores, admin_for)
    stable, absent = hashes("s", 8), hashes("x", 8)
    put(store, space.keys(stable))
    stop = threading.Event()
    errors: list[str] = []

    def load(n: int) -> None:
        out = np.zeros(PAGE, np.uint8)
        keys = space.keys(hashes(f"l{n}", 8))
        try:
            while not stop.is_set():  # a set may find no DRAM room in time (False): not an error
                store.put_batch(keys, [[memoryview(_DATA)] for _ in keys])
                store.get_batch_into(keys, [[memoryview(out)] for _ in keys])
        except Exception as exc:  # the test fails on it below
            errors.append(f"thread {n}: {exc!r}")

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(60):
            answer = admin.lookup(stable + absent)
            tiers = answer["tiers"]
            assert all(t in ("dram", "ssd") for t in tiers[:8]), tiers
            assert tiers[8:] == [None] * 8 and answer["longest_prefix"] == 8
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:3]
    assert store.contains_batch(space.keys(stable)) == [True] * 8


def test_a_page_of_several_objects_is_held_when_all_are(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    space = keyspace()
    groups = ("@hg0of2", "@hg1of2")
    admin = admin_for(store, config, store_keys=lambda h, t: [k + g for k in space.keys(h) for g in groups])
    pages = hashes("a", 3)
    put(store, [k + g for k in space.keys(pages[:2]) for g in groups])
    put(store, [space.key(pages[2]) + groups[0]])  # one head group of the third page only
    answer = admin.lookup(pages)
    assert answer["tiers"] == ["dram", "dram", None] and answer["longest_prefix"] == 2
    assert page_tiers(["dram", "ssd", "ssd", "dram", None, "ssd"], 2) == ["ssd", "ssd", None]


def test_the_remote_pool_is_asked_only_when_the_request_says_so(
    tmp_path, stores, admin_for, node_factory, monkeypatch
):
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node = node_factory("n0")
    pool = {"nodes": [{"node_id": "n0", "host": "127.0.0.1", "port": node.port}], "backend": "embedded"}
    config = small_config(
        tmp_path, ssd=False, tiers={"remote": {"enabled": True, "timeout_s": 2.0}}, metadata=pool
    )
    store = stores(config)
    space = keyspace()
    admin = admin_for(store, config, store_keys=mapping(space))
    pages = hashes("a", 3)
    put(store, space.keys(pages))  # the pool is write-through: it has every page too
    dram = store.dram
    assert dram is not None and dram.remove(space.key(pages[1]))
    local = admin.lookup(pages)
    assert local["tiers"] == ["dram", None, "dram"] and local["asked"] == ["dram"]
    everywhere = admin.lookup(pages, remote=True)
    assert everywhere["tiers"] == ["dram", "remote", "dram"] and everywhere["longest_prefix"] == 3
    assert everywhere["asked"] == ["dram", "remote"]


def test_bad_lookups_are_refused_with_what_is_wrong(tmp_path, stores, admin_for):
    store, space, admin = lookup_store(tmp_path, stores, admin_for)
    cases = [
        ({"keys": [12345, -7]}, 400, "block hashes"),
        ({"keys": []}, 400, "'keys' is empty"),
        ({"keys": "abc"}, 400, "'keys' is required"),
        ({"keys": ["a", ""]}, 400, "'keys'[1]"),
        ({"keys": ["a"], "remote": "yes"}, 400, "'remote'"),
        ({"keys": ["a"], "tenant": "a b"}, 400, "'tenant'"),
    ]
    for body, status, text in cases:
        with pytest.raises(AdminError) as err:
            admin.request("POST", "/v1/lookup", body)
        assert err.value.status == status and text in str(err.value), (body, err.value)
    with pytest.raises(AdminError) as err:
        AdminClient(admin.url, "wrong").lookup(["a"])
    assert err.value.status == 401
    bare = admin_for(store, small_config(tmp_path / "b"))  # no SGLang backend: no key space
    with pytest.raises(AdminError) as err:
        bare.lookup(["a"])
    assert err.value.status == 409 and "no key space" in str(err.value)
