"""``batch_exists_v2``'s arithmetic (hicache_mooncake.sglang_adapter.hit_policy), case by case; the same rules run
through SGLang's real pools in tests/sglang/test_hybrid_pools.py."""

from __future__ import annotations

from hicache_mooncake.sglang_adapter.hit_policy import (
    PoolQuery,
    block_group_pages,
    evaluate,
    trailing_stop_points,
)


def bits(n: int, present: set[int]) -> list[bool]:
    return [i in present for i in range(n)]


def test_trailing_window_keeps_the_holes():
    # Mamba states at lengths 2 and 5 only: 5 and 2 are restorable, 3 and 4 are not
    r = evaluate(6, [PoolQuery("mamba", "trailing_pages", bits(6, {1, 4}))])
    assert r.restorable == [2, 5] and r.kv_hit_pages == 5 and r.pool_hits == {"kv": 6, "mamba": 5}


def test_trailing_window_shorter_than_the_prefix_needs_every_page_before_it():
    assert trailing_stop_points(bits(4, {1, 2, 3}), 4, window=2) == {3, 4}  # 1 and 2 need page 0
    assert trailing_stop_points(bits(4, {0, 1, 2, 3}), 4, window=3) == {1, 2, 3, 4}


def test_all_pages_cuts_at_the_first_missing_page_and_pools_intersect():
    r = evaluate(
        6,
        [
            PoolQuery("indexer", "all_pages", bits(6, {0, 1, 2, 3, 5})),
            PoolQuery("mamba", "trailing_pages", bits(6, {2, 5})),
        ],
    )
    assert r.restorable == [3] and r.kv_hit_pages == 3
    assert r.pool_hits == {"kv": 6, "indexer": 4, "mamba": 6}  # each pool's own verdict


def test_no_kv_no_restorable_length_and_later_pools_give_no_verdict():
    assert evaluate(0, [PoolQuery("mamba", "trailing_pages", [])]).pool_hits == {}
    r = evaluate(
        3, [PoolQuery("swa", "trailing_pages", bits(3, set())), PoolQuery("idx", "all_pages", bits(3, {0}))]
    )
    assert r.restorable == [] and r.kv_hit_pages == 0 and r.pool_hits == {"kv": 3}


def test_block_groups_count_whole_blocks_from_the_span_start_and_never_gate():
    present = bits(8, {1, 3, 7})  # groups of 1 page ending blocks of 2: pages 1, 3, 5, 7
    assert block_group_pages(present, block_pages=2, group_pages=1) == 4  # page 5 missing
    assert block_group_pages(bits(5, {0, 1, 2, 3, 4}), 2, 2) == 4  # a partial block never counts
    assert block_group_pages(present, 0, 1) == 0 and block_group_pages(present, 2, 3) == 0  # bad geometry
    r = evaluate(2, [PoolQuery("c128", "block_groups", present, block_pages=2, group_pages=1)])
    assert r.restorable == [1, 2] and r.pool_hits == {"kv": 2, "c128": 4}
