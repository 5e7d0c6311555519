"""``bench sglang`` runs end to end on small workloads, its hybrid case and its main one (figures
are not asserted: performance is measured by the benchmark, not by tests)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.sglang


def test_bench_sglang_hybrid_case_writes_its_row(tmp_path):
    from hicache_mooncake.cli import main

    out = tmp_path / "hybrid.json"
    assert (
        main(
            ["bench", "sglang", "--hybrid", "only", "--total", "32MiB", "--repeats", "1", "--json", str(out)]
        )
        == 0
    )
    row = json.loads(out.read_text())["hybrid"]
    assert row["nodes"] == 2 and row["state_bytes"] > 1 << 20
    assert row["set_ratio_vs_memcpy"] > 0 and row["get_ratio_vs_memcpy"] > 0


def test_bench_sglang_verifies_every_page_and_reports_each_side(tmp_path):
    """The main case on one small size: every page of every get compared for every side (ours,
    ours next to a busy Python thread, the DRAM tier, SGLang's file backend, memcpy), and the JSON
    keys the README's figures come from."""
    from hicache_mooncake.cli import main

    out = tmp_path / "sglang.json"
    argv = [
        "bench",
        "sglang",
        "--sizes",
        "64KiB,1MiB",
        "--total",
        "16MiB",
        "--repeats",
        "1",
        "--hybrid",
        "skip",
    ]
    assert main([*argv, "--no-host-cache", "--dir", str(tmp_path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    small, row = data["per_page_size"]
    sides = {"ours", "busy", "tier", "file", "memcpy"}
    for r in (small, row):
        assert r["bad_pages"] == dict.fromkeys(sides | {"full"}, 0)
        verified = r["pages_verified"]
        assert verified == {**dict.fromkeys(sides, r["pages"]), "full": verified["full"]} and r["pages"] >= 16
        # sets into a full cache: DRAM held a quarter of the pages, each call at most a quarter
        # of DRAM, so every timed page was copied in (none dropped within its own call); the
        # newest calls, half of DRAM, read back
        dram_pages = r["full_cache_dram_bytes"] // r["page_bytes"]
        assert r["full_cache_dram_bytes"] <= r["pages"] * r["page_bytes"] // 2
        assert 1 <= r["full_cache_pages_per_call"] <= max(1, dram_pages // 4)
        assert r["full_cache_not_admitted_per_set_page"] == 0
        assert 0 < verified["full"] <= dram_pages // 2
        assert 0.9 < r["full_cache_evicted_per_set_page"] <= 1  # every timed page evicted one page
        for key in (
            "set_ratio_vs_file", "get_ratio_vs_file", "dram_set_ratio_vs_memcpy", "dram_get_ratio_vs_memcpy",
            "default_set_ratio_vs_memcpy", "default_get_ratio_vs_memcpy", "busy_set_ratio_vs_alone",
            "busy_get_ratio_vs_alone", "full_cache_set_ratio_vs_memcpy",
        ):  # fmt: skip
            assert r[key] > 0, key
    assert data["busy_ratio_vs_alone"] == min(
        r[f"busy_{op}_ratio_vs_alone"] for r in (small, row) for op in ("set", "get")
    )
    # the 1-8 MiB figures and the small-page ones each come from their own rows
    assert data["dram_ratio_vs_memcpy"] == min(
        row["dram_set_ratio_vs_memcpy"], row["dram_get_ratio_vs_memcpy"]
    )
    assert data["small_page_dram_ratio_vs_memcpy"] == min(
        small["dram_set_ratio_vs_memcpy"], small["dram_get_ratio_vs_memcpy"]
    )
    assert data["small_page_default_config_ratio_vs_memcpy"] == min(
        small["default_set_ratio_vs_memcpy"], small["default_get_ratio_vs_memcpy"]
    )
    assert data["full_cache_set_ratio_vs_memcpy"] == row["full_cache_set_ratio_vs_memcpy"]
    assert data["small_page_full_cache_set_ratio_vs_memcpy"] == small["full_cache_set_ratio_vs_memcpy"]
    assert data["host_cache_ratio_vs_memcpy"] is None
