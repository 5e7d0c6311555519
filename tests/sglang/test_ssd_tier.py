"""DRAM + SSD through our backend (SGLang's factory, host pools): demotion, promotion,
re-attach finding SSD data, write-through, write budget, durable clear. Real files."""

from __future__ import annotations

import pytest
import torch
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake.sglang_harness import fill_random_pages, page_snapshot

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size
PAGE = SMALL.page_bytes()  # 24 KiB


POLICIES = ["lru", "reuse"]  # every policy places pages through the one store


def ssd_extra(path, policy="lru", **ssd) -> dict:
    extra = small_extra(
        policy=policy,
        dram={"capacity": "1MiB", "slab_size": "1MiB"},
        ssd={
            "enabled": True,
            "path": str(path),
            "capacity": "16MiB",
            "region_size": "1MiB",
            "min_free": 0,
            "high_watermark": 0.5,
            "low_watermark": 0.25,
            **ssd,
        },
    )
    return extra


def keys(n: int, start: int = 0, tag: str = "s") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(start, start + n)]


def write_pages(backend, host, n, tag="s", seed=0) -> dict[str, torch.Tensor]:
    """Write n pages in batches of 8 (each batch's content differs), waiting for demotion."""
    want = {}
    for b in range(0, n, 8):
        idx = host.alloc(8 * PS)
        fill_random_pages(host, idx, seed=seed + b)
        ks = keys(8, b, tag)
        assert all(backend.batch_set_v1(ks, idx))
        want.update(zip(ks, page_snapshot(host, idx), strict=True))
        host.free(idx)
        backend.store.flush()
    return want


def read_back(backend, host, want) -> int:
    dst = host.alloc(PS)
    good = 0
    for k, expected in want.items():
        if backend.batch_get_v1([k], dst) == [True]:
            assert torch.equal(page_snapshot(host, dst)[0], expected), k
            good += 1
    host.free(dst)
    return good


@pytest.mark.parametrize("policy", POLICIES)
def test_cold_pages_are_demoted_to_ssd_and_served_byte_exact(tmp_path, policy):
    backend, host = make_backend(extra=ssd_extra(tmp_path, policy))
    want = write_pages(backend, host, 120)  # 2.8 MiB through a 1 MiB DRAM tier
    stats = backend.tier_stats()["tiers"]
    assert stats["ssd"]["background"]["demoted"] > 0
    assert stats["dram"]["used_bytes"] <= 1 << 20
    assert backend.batch_exists(list(want)) == len(want)  # nothing lost: demoted, not dropped
    assert read_back(backend, host, want) == len(want)
    placement = backend.tier_stats()["tiers"]["placement"]
    assert placement["promotions"] > 0  # SSD hits came back to DRAM
    assert placement["dram_used"] <= placement["dram_capacity"]
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_reattach_with_the_same_yaml_finds_the_ssd_data(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    backend, host = make_backend(extra=extra)
    want = write_pages(backend, host, 64, seed=7)
    on_ssd = [k for k in want if backend.store.tier("ssd").contains(backend._keys.key(k))]
    assert on_ssd
    backend.close()
    again, host2 = make_backend(extra=extra)  # a fresh attach: recovery scans the regions
    assert again.tier_stats()["tiers"]["ssd"]["recovered_entries"] >= len(on_ssd)
    assert read_back(again, host2, {k: want[k] for k in on_ssd}) == len(on_ssd)
    again.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_write_through_copies_every_set_in_the_background(tmp_path, policy):
    """``mode: write_through`` means the same under every policy: each new page gets an SSD copy
    although DRAM has room for all of them (so a kill -9 loses none)."""
    backend, host = make_backend(
        extra=ssd_extra(tmp_path, policy, mode="write_through", high_watermark=0.99, low_watermark=0.9)
    )
    want = write_pages(backend, host, 16, tag="w")
    ssd = backend.store.tier("ssd")
    assert all(ssd.contains(backend._keys.key(k)) for k in want)
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_write_budget_drops_instead_of_blocking(tmp_path, policy):
    backend, host = make_backend(extra=ssd_extra(tmp_path, policy, write_budget_mbps=0.01))  # ~10 KB/s
    write_pages(backend, host, 80, tag="b")
    ssd = backend.tier_stats()["tiers"]["ssd"]
    assert ssd["dropped_budget"] > 0
    assert ssd["entries"] == 0
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_cold_admission_gate_keeps_unread_pages_off_the_ssd(tmp_path, policy):
    backend, host = make_backend(extra=ssd_extra(tmp_path, policy, admit_min_hits=1))
    write_pages(backend, host, 80, tag="c")
    assert backend.tier_stats()["tiers"]["ssd"]["dropped_cold"] > 0
    assert backend.tier_stats()["tiers"]["ssd"]["entries"] == 0
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_clear_is_durable_across_reattach(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    backend, host = make_backend(extra=extra)
    want = write_pages(backend, host, 64, tag="x")
    backend.clear()
    assert backend.batch_exists(list(want)[:1]) == 0
    backend.close()
    again, _ = make_backend(extra=extra)
    assert again.batch_exists(list(want)) == 0
    assert again.tier_stats()["tiers"]["ssd"]["entries"] == 0
    again.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_ssd_only_configuration_stores_synchronously(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    extra["tiers"]["dram"]["enabled"] = False
    backend, host = make_backend(extra=extra)
    assert [t.name for t in backend.store.tiers] == ["ssd"]
    idx = host.alloc(4 * PS)
    fill_random_pages(host, idx, seed=5)
    want = dict(zip(keys(4, tag="o"), page_snapshot(host, idx), strict=True))
    assert all(backend.batch_set_v1(list(want), idx))
    assert read_back(backend, host, want) == 4
    backend.close()


def test_a_second_attach_on_the_same_ssd_directory_is_refused_clearly(tmp_path):
    extra = ssd_extra(tmp_path)
    first, _ = make_backend(extra=extra)
    with pytest.raises(Exception, match="(?i)in use|lock"):
        make_backend(extra=extra)
    first.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_detach_flushes_dram_pages_to_ssd_for_the_next_attach(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    backend, host = make_backend(extra=extra)
    idx = host.alloc(8 * PS)
    fill_random_pages(host, idx, seed=9)
    want = dict(zip(keys(8, tag="d"), page_snapshot(host, idx), strict=True))
    assert all(backend.batch_set_v1(list(want), idx))  # fits in DRAM: nothing demoted yet
    assert backend.tier_stats()["tiers"]["ssd"]["entries"] == 0
    backend.close()
    again, host2 = make_backend(extra=extra)
    assert read_back(again, host2, want) == 8
    again.close()


def test_detach_without_flush_drops_dram_pages(tmp_path):
    extra = ssd_extra(tmp_path, flush_on_detach_s=0)
    backend, host = make_backend(extra=extra)
    assert all(backend.batch_set_v1(keys(4, tag="n"), host.alloc(4 * PS)))
    backend.close()
    again, _ = make_backend(extra=extra)
    assert again.batch_exists(keys(4, tag="n")) == 0
    again.close()
