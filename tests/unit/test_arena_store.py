"""The store a memory node and the host cache serve (``ArenaStore`` over the one ``TieredStore``):
one-sided writers reserve, fill and commit through the placement; one-sided readers find pages in
the arena (SSD pages brought up first) and validate object headers; a departed writer leaves
nothing reserved; bodies stay page-aligned in a shared arena another process maps."""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.arena_store import ArenaStore
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore
from hicache_mooncake.transport.arena_files import ArenaSpec
from hicache_mooncake.transport.arena_header import ARENA_HEADER_SIZE, ArenaHeader
from hicache_mooncake.transport.node.served_store import (
    RESERVED_BUSY,
    RESERVED_NEW,
    RESERVED_NO_SPACE,
    RESERVED_PRESENT,
)
from hicache_mooncake.transport.object_header import HEADER_SIZE, ObjectHeader
from hicache_mooncake.transport.wire import SetHint

MiB = 1 << 20
PAGE = 60_000  # not a multiple of 4096: the header follows the body inside the slot
FAR = 1e18


def body(key: str, n: int = PAGE) -> bytes:
    return np.random.default_rng(abs(hash(key)) % 2**32).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[ArenaStore] = []

    def build(
        dram_mib: int = 2, ssd: bool = False, policy: str = "lru", shared: ArenaSpec | None = None
    ) -> ArenaStore:
        tiers: list[Any] = [DramTier(dram_mib * MiB, MiB, prefault=False, shared=shared, object_headers=True)]
        if ssd:
            engine = SsdEngine(
                SsdOptions(
                    dirs=(str(tmp_path / "ssd"),), capacity_bytes=16 * MiB, region_size=MiB, direct_io="off"
                )
            )
            tiers.append(SsdTier(engine))
        store = ArenaStore(TieredStore(tiers, lambda: make_policy(policy), StoreOptions(timeout_s=5)))
        made.append(store)
        return store

    yield build
    for s in made:
        s.close()


def write(store: ArenaStore, keys: list[str], owner: object = "w") -> list[int]:
    """What a one-sided writer does: reserve, copy into the arena, commit."""
    reserved = store.reserve([(k, PAGE, 0) for k in keys], owner, SetHint(0, None), FAR)
    view = store.view
    todo = []
    for key, (status, offset, version) in zip(keys, reserved.tolist(), strict=True):
        if status == RESERVED_NEW:
            assert offset % 4096 == 0  # bodies stay page-aligned
            view[offset : offset + PAGE] = body(key)
            todo.append((key, version))
    assert all(store.commit(todo, owner, FAR))
    return reserved["status"].tolist()


def read(store: ArenaStore, ref: Any, key: str) -> bytes | None:
    """What a one-sided reader does with a LOOKUP record: header, body, header; valid only if
    both headers match."""
    view = store.view
    h1 = ObjectHeader.unpack(bytes(view[ref["header"] : ref["header"] + HEADER_SIZE]))
    data = bytes(view[ref["offset"] : ref["offset"] + ref["size"]])
    h2 = ObjectHeader.unpack(bytes(view[ref["header"] : ref["header"] + HEADER_SIZE]))
    ok = h1.matches(key, ref["version"], ref["size"]) and h2.matches(key, ref["version"], ref["size"])
    return data if ok else None


def test_written_pages_are_found_and_valid_and_immutable(make: Any) -> None:
    store = make()
    keys = [f"k{i}" for i in range(5)]
    assert write(store, keys) == [RESERVED_NEW] * 5
    assert write(store, keys[:2]) == [RESERVED_PRESENT] * 2  # already there: nothing to send
    refs = store.lookup([(k, PAGE) for k in keys] + [("absent", PAGE)], FAR)
    assert [r["found"] for r in refs] == [True] * 5 + [False]
    assert all(read(store, r, k) == body(k) for r, k in zip(refs, keys, strict=False))
    assert not store.lookup([("k0", PAGE + 1)], FAR)[0]["found"]  # another size is a miss
    assert store.exists(keys + ["absent"]) == [True] * 5 + [False]
    assert store.stats()["objects"] == 5 and store.stats()["pending"] == 0


def test_a_removed_page_fails_the_header_check_even_when_its_slot_is_reused(make: Any) -> None:
    store = make()
    write(store, ["old"])
    [ref] = store.lookup([("old", PAGE)], FAR)
    assert store.remove(["old"]) == [True]
    assert read(store, ref, "old") is None  # invalidated at removal
    write(store, ["new"])
    [new] = store.lookup([("new", PAGE)], FAR)
    assert new["offset"] == ref["offset"]  # the slot was reused...
    assert read(store, ref, "old") is None  # ...and the stale reference still misses


def test_reservations_are_private_busy_for_others_and_released_with_their_owner(make: Any) -> None:
    store = make(dram_mib=1)
    used = store.stats()["used"]
    [(status, offset, version)] = store.reserve([("k", PAGE, 0)], "a", SetHint(), FAR).tolist()
    assert status == RESERVED_NEW
    assert store.reserve([("k", PAGE, 0)], "b", SetHint(), FAR)["status"].tolist() == [RESERVED_BUSY]
    assert store.writable(offset, PAGE) and not store.readable(offset, PAGE)
    assert store.commit([("k", version)], "b", FAR) == [False]  # not b's
    assert store.owns_pending("a") and not store.lookup([("k", PAGE)], FAR)[0]["found"]
    assert store.release_owner("a") == 1  # the connection went away
    assert store.stats()["pending"] == 0 and store.stats()["used"] == used
    assert not store.exists(["k"])[0] and not store.writable(offset, PAGE)


def test_one_reserve_answers_new_present_and_busy_per_key(make: Any) -> None:
    store = make()
    write(store, ["held"])
    items = [("a", PAGE, 0), ("held", PAGE, 0), ("a", PAGE, 0), ("b", PAGE, 0)]
    records = store.reserve(items, "w", SetHint(), FAR).tolist()
    # the second "a" of the same call is busy: the first holds the reservation
    assert [r[0] for r in records] == [RESERVED_NEW, RESERVED_PRESENT, RESERVED_BUSY, RESERVED_NEW]
    (_, a_at, a_version), (_, b_at, b_version) = records[0], records[3]
    assert a_at != b_at and a_at % 4096 == 0 and b_at % 4096 == 0
    assert store.writable(a_at, PAGE) and store.writable(b_at, PAGE)
    assert records[1][1:] == (0, 0) and records[2][1:] == (0, 0)
    store.view[a_at : a_at + PAGE] = body("a")
    store.view[b_at : b_at + PAGE] = body("b")
    assert store.commit([("a", a_version), ("b", b_version)], "w", FAR) == [True, True]
    refs = store.lookup([("a", PAGE), ("b", PAGE)], FAR)
    assert [read(store, r, k) for r, k in zip(refs, "ab", strict=True)] == [body("a"), body("b")]
    assert store.stats()["pending"] == 0


def test_a_full_dram_only_store_makes_room_by_its_policy(make: Any) -> None:
    store = make(dram_mib=1)  # one slab: 17 slots of 60 KiB (body + header)
    keys = [f"k{i}" for i in range(40)]
    for key in keys:
        assert write(store, [key]) == [RESERVED_NEW]
    held = store.exists(keys)
    assert store.dram.capacity_objects(PAGE) == 17
    assert held[-1] and 0 < sum(held) <= 17  # the newest stay, the policy's victims went
    assert store.reserve([("huge", 2 * MiB, 0)], "w", SetHint(), FAR)["status"].tolist() == [
        RESERVED_NO_SPACE
    ]


def test_a_full_served_store_drops_its_policys_victims_not_its_least_recent_pages(make: Any) -> None:
    """A one-sided writer reserves its slots before its commit reaches the placement, so every
    reserve of a full store must make room first. With one page size in every slab that room is
    the policy's victims (here S3-FIFO's: pages read twice outlive pages never read, although
    they were read before the others were written); DRAM's least recent pages are not."""
    store = make(dram_mib=4, policy="s3fifo")
    slots = store.dram.capacity_objects(PAGE)
    read_twice = [f"a{i}" for i in range(slots // 2)]
    never_read = [f"b{i}" for i in range(slots // 2)]
    write(store, read_twice)
    for _ in range(2):
        assert all(store.lookup([(k, PAGE) for k in read_twice], FAR)["found"])
    write(store, never_read)
    assert store.store.flush(5)
    newer = [f"c{i}" for i in range(slots // 4)]
    assert write(store, newer) == [RESERVED_NEW] * len(newer)
    assert store.store.flush(5)
    assert all(store.exists(read_twice)) and all(store.exists(newer))
    assert store.exists(never_read).count(False) == len(newer)
    assert store.store.stats()["placement"]["dropped"] == len(newer)


def test_commit_goes_through_the_placement(make: Any) -> None:
    store = make()
    write(store, ["a", "b"])
    assert store.store.flush(5)  # the placement runs after the commit's reply
    placement = store.store.stats()["placement"]
    assert placement["resident"] == 2 and placement["in_dram"] == 2


def test_lookup_brings_ssd_pages_into_the_arena_within_the_call(make: Any) -> None:
    store = make(dram_mib=1, ssd=True)
    keys = [f"k{i}" for i in range(40)]  # more than DRAM holds: the oldest are demoted to SSD
    for key in keys:
        write(store, [key])
    assert store.store.flush(10)
    tiers = store.store.stats()
    assert tiers["ssd"]["entries"] >= 20 and tiers["dram"]["entries"] < 40
    before = tiers["placement"].get("promotions", 0)
    refs = store.lookup([(k, PAGE) for k in keys[:8]], time.monotonic() + 5)
    assert all(r["found"] for r in refs)
    assert all(read(store, r, k) == body(k) for r, k in zip(refs, keys[:8], strict=True))
    assert store.store.stats()["placement"]["promotions"] - before == 8


def test_pins_keep_bytes_until_unpinned(make: Any) -> None:
    store = make()
    write(store, ["p"])
    [pin] = store.pin([("p", PAGE)], FAR)
    assert pin is not None and bytes(store.view[pin.offset : pin.offset + pin.size]) == body("p")
    assert store.remove(["p"]) == [True]
    write(store, ["q"])  # the pinned slot is not reused while pinned
    assert bytes(store.view[pin.offset : pin.offset + pin.size]) == body("p")
    store.unpin([pin])
    assert store.pin([("missing", PAGE)], FAR) == [None]


def test_a_shared_arena_is_a_proven_file_another_mapping_reads(make: Any, tmp_path: Path) -> None:
    shm_dir = tmp_path / "shm"  # any directory works; the service uses host_cache.shm_dir
    shm_dir.mkdir()
    spec = ArenaSpec(str(shm_dir), "unit", 7, ArenaHeader.new_token())
    store = make(shared=spec)
    write(store, ["s"])
    path = store.shm_path
    with open(path, "rb") as f:
        header = ArenaHeader.unpack(f.read(ARENA_HEADER_SIZE))
        assert header is not None and header.node_id == "unit" and header.token == spec.token
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    [ref] = store.lookup([("s", PAGE)], FAR)
    assert ref["offset"] >= ARENA_HEADER_SIZE and ref["offset"] % 4096 == 0
    assert mapped[ref["offset"] : ref["offset"] + PAGE] == body("s")  # what another process sees
    mapped.close()
    store.close()
    assert not os.path.exists(path)
