"""SSD admission of a batch (``SsdTier.admit_batch``, the mover's one step per demotion batch)
decides as the per-page admission did: cold pages first dropped and not charged, then each warm
page admitted while the write budget has its bytes, in order."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from hicache_mooncake.tiers.rate_budget import RateBudget
from hicache_mooncake.tiers.ssd_tier import SsdTier

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ssd"))
from ssd_helpers import open_engine  # noqa: E402


class ReferenceBucket:
    """The budget page by page, without refill: a page is taken while the bucket holds it."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def take(self, n: int) -> bool:
        if n > self.tokens:
            return False
        self.tokens -= n
        return True


@pytest.mark.parametrize("seed", range(10))
def test_a_batch_takes_the_budget_as_page_by_page_takes_did(seed: int) -> None:
    rng = random.Random(seed)
    # 1 byte per second: the refill over the whole test is far below one byte (sizes are whole)
    batched, single, ref = (
        RateBudget(1.0, burst_s=10_000.0),
        RateBudget(1.0, burst_s=10_000.0),
        ReferenceBucket(10_000),
    )
    for _ in range(20):
        sizes = [rng.choice([0, 1, 100, 999, 2500, 4096]) for _ in range(rng.randrange(0, 12))]
        want = [ref.take(n) for n in sizes]
        assert batched.take_each(sizes) == want
        assert [single.try_take(n) for n in sizes] == want
    assert RateBudget(None).take_each([1 << 40, 1]) == [True, True]


def test_admission_of_a_batch_drops_cold_pages_then_what_the_budget_lacks(tmp_path: Path) -> None:
    engine = open_engine(str(tmp_path / "ssd"), capacity_bytes=8 << 20, region_size=1 << 20)
    try:
        tier = SsdTier(engine, admit_min_hits=1, write_budget=RateBudget(1.0, burst_s=10_000.0))
        flags = tier.admit_batch([4000, 4000, 3000, 5000, 2000, 100], [1, 0, 2, 1, 1, 0])
        # cold (0 reads): pages 1 and 5; the 10000-byte budget takes 4000 + 3000 + 2000 and
        # refuses 5000 in between
        assert flags == [True, False, True, False, True, False]
        assert (tier.counts["dropped_cold"], tier.counts["dropped_budget"]) == (2, 1)
        assert tier.admit_batch([], []) == []
    finally:
        engine.close()
