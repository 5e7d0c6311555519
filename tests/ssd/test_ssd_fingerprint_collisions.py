"""Two keys with one fingerprint (forced: the test-only fingerprint mask makes every key's
fingerprint 1): the SSD index holds fingerprints only, but every read checks the full key in the
entry header, so each get returns its own bytes or a miss, never the other key's bytes; the
miss is counted (``fingerprint_collisions``, in the engine's and the tier's stats and the
tier's metrics); and the same holds after a clean reopen (summaries) and after a crash (no
summaries: the regions are scanned)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import numpy as np
import pytest
from ssd_helpers import aligned_array, open_engine, value_for

from hicache_mooncake.metrics.tiers import TierStatsCollector
from hicache_mooncake.native import fingerprint, set_test_fingerprint_mask
from hicache_mooncake.ssd import SsdEngine
from hicache_mooncake.tiers.ssd_tier import SsdTier

SIZE = 16 << 10


@pytest.fixture
def all_keys_collide() -> Iterator[None]:
    set_test_fingerprint_mask(1)  # every fingerprint & 1, and 0 -> 1: all keys share fingerprint 1
    try:
        assert fingerprint("a") == fingerprint("b") == 1
        yield
    finally:
        set_test_fingerprint_mask(0)
    assert fingerprint("a") != fingerprint("b")


def _get(e: SsdEngine, key: str) -> bytes | None:
    out = aligned_array(SIZE)
    out[:] = 0
    return out.tobytes() if e.get_batch_into([(key, [memoryview(out)])])[0] else None


def _own_or_miss(e: SsdEngine) -> dict[str, bytes | None]:
    got = {k: _get(e, k) for k in ("a", "b")}
    for k, data in got.items():
        assert data is None or data == value_for(k, SIZE).tobytes(), f"{k} got other bytes"
    return got


def _page(key: str) -> memoryview:
    arr = aligned_array(SIZE)
    arr[:] = value_for(key, SIZE)
    return memoryview(arr)


@pytest.mark.parametrize("together", [False, True])
def test_colliding_keys_read_their_own_bytes_or_miss_and_the_miss_is_counted(
    ssd_dir: str, all_keys_collide: None, together: bool
) -> None:
    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    try:
        if together:  # one batch: both written, the later one holds the shared slot
            assert e.put_batch([("a", [_page("a")]), ("b", [_page("b")])]) == [True, True]
        else:  # the second is taken for stored (the slot is held): a miss later, never a write
            assert e.put("a", [_page("a")]) and e.put("b", [_page("b")])
        got = _own_or_miss(e)
        assert sum(v is not None for v in got.values()) == 1  # one slot: one of them is served
        assert e.stats()["fingerprint_collisions"] == 1
        assert e.stats()["read_checksum_errors"] == 0  # a collision is not corruption...
        assert _own_or_miss(e) == got  # ...and the entry stays indexed for its own key
        tier = SsdTier(e)
        assert tier.stats()["fingerprint_collisions"] == 2
        metrics = TierStatsCollector(lambda: {"ssd": tier.stats()}, {}).collect()
        families = {f.name.split(":")[-1]: f for f in metrics}
        assert families["tier_fingerprint_collisions"].samples[0].value == 2
    finally:
        e.close()

    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)  # from the summaries
    try:
        assert e.stats()["recover_from_summaries"] >= 1
        assert _own_or_miss(e) == got and e.stats()["fingerprint_collisions"] == 1
    finally:
        e.close()

    for summary in glob.glob(os.path.join(ssd_dir, "*.sum")):
        os.unlink(summary)  # as after a crash: every region is scanned
    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    try:
        assert e.wait_recovered(30)
        assert _own_or_miss(e) == got and e.stats()["fingerprint_collisions"] == 1
    finally:
        e.close()


def test_without_the_mask_the_same_keys_are_both_served(ssd_dir: str) -> None:
    """The control: the same sequence with real fingerprints serves both keys."""
    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    try:
        assert e.put("a", [_page("a")]) and e.put("b", [_page("b")])
        got = _own_or_miss(e)
        assert all(v is not None for v in got.values()) and e.stats()["fingerprint_collisions"] == 0
        assert np.array_equal(np.frombuffer(got["b"] or b"", np.uint8), value_for("b", SIZE))
    finally:
        e.close()
