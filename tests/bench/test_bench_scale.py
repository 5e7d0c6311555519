"""``hicache-mooncake bench scale`` end to end on a small count: a writer process filled through
SGLang's interface and killed with SIGKILL, a reopen process after the kill and after a clean
close; every entry found both times, and the JSON carries the keys the README's figures come from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_bench_scale_end_to_end(tmp_path: Path) -> None:
    out, png = tmp_path / "bench_scale.json", tmp_path / "bench_scale.png"
    work = tmp_path / "work"
    work.mkdir()
    cmd = [
        sys.executable, "-m", "hicache_mooncake", "bench", "scale", "--json", str(out), "--plot", str(png),
        "--dir", str(work), "--entries", "800,1600", "--samples", "100", "--dram", "64MiB",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "entries of 4.0KiB" in proc.stdout
    data = json.loads(out.read_text())
    assert png.stat().st_size > 0
    assert list(work.iterdir()) == []  # everything written is removed
    assert [r["entries"] for r in data["per_entries"]] == [800, 1600]
    for row in data["per_entries"]:
        n = row["entries"]
        assert row["writer"]["set_failed"] == 0 and row["writer"]["ssd_copies_done"] is True
        # every page set is found after the kill and after the clean close (+1: the warm-up page)
        assert row["entries_found_after_kill"] == row["entries_found_clean"] == n + 1
        assert row["writer"]["exists"]["found_fraction"] == 1.0
        for label in ("after_kill", "clean"):
            assert row["reopen"][label]["exists"]["found_fraction"] == 1.0
        assert row["bytes_per_entry"] > 0 and 0 < row["exists_p50_us"] <= row["exists_p99_us"]
        # (objects per entry: at these counts mostly the write path's, a bounded number; the
        # index's own are asserted in tests/ssd/test_ssd_index.py)
        assert row["gc_tracked_objects_per_entry"] > 0
        assert row["gc_full_collection_ms"] > 0 and row["gc_full_collection_ms_before_fill"] > 0
        assert 0 < row["reopen_after_kill_s"] <= row["reopen_after_kill_all_indexed_s"]
        assert row["reopen"]["clean"]["regions_from_summaries"] >= 1
        scanning = row["reopen"]["after_kill"]["exists_while_scanning"]
        assert scanning["samples"] == 0 or scanning["p50_us"] <= scanning["p99_us"] <= scanning["max_us"]
        assert ("exists_p99_us_while_scanning" in row) and ("exists_max_us_while_scanning" in row)
        # the default policy alone at its steady state: it observes horizon (4) capacities of keys
        policy = row["policy"]
        assert policy["policy"] == "ReusePolicy" and policy["residents"] == n
        assert policy["keys_set"] == 6 * n and 4 * n <= policy["observations"] <= 4 * (n + 1) + 1024
        assert 0 < policy["call_p50_ms"] <= policy["call_p99_ms"] <= policy["longest_call_ms"]
        assert row["policy_longest_call_ms"] == policy["longest_call_ms"]
        assert policy["reread_calls"] == 5 * n // policy["batch"]
        assert policy["seconds"] > 0 and policy["reread_seconds"] > 0
        assert (
            0
            < policy["reread_call_p50_ms"]
            <= policy["reread_call_p99_ms"]
            <= policy["reread_longest_call_ms"]
        )
        assert row["policy_reread_longest_call_ms"] == policy["reread_longest_call_ms"]
        assert row["bytes_per_entry_steady_estimate"] == pytest.approx(
            row["bytes_per_entry"] + policy["bytes_per_resident_steady"] - policy["bytes_per_resident_filled"]
        )
    assert set(data["targets"]) == {
        "bytes_per_entry",
        "exists_p99_us",
        "reopen_clean_s",
        "reopen_after_kill_s",
    }
    assert "exists_p99_us_per_million_entries" in data
    # issue 49's figures by their names, at the largest count
    assert data["bytes_per_entry"] == data["per_entries"][-1]["bytes_per_entry"]
    assert data["exists_p99_us"] == data["per_entries"][-1]["exists_p99_us"]


def test_bench_scale_index_only_fills_the_default_placement_and_an_ssd_index(tmp_path: Path) -> None:
    """``--index-only``'s child (no payload, no backend): every key resident in the default policy,
    DRAM's share at its watermarks, every looked-up key found in the SSD index."""
    import argparse

    from hicache_mooncake.tools.bench.scale import _child_index

    out = tmp_path / "index.json"
    args = argparse.Namespace(
        child_n=20000, batch=128, page_bytes="4KiB", dram="64MiB", child_dir=str(tmp_path), child_out=str(out),
        samples=50,
    )  # fmt: skip
    assert _child_index(args) == 0
    row = json.loads(out.read_text())
    assert row["policy"] == "ReusePolicy" and row["residents"] == 20000
    assert 0 < row["dram_residents"] <= 16384 * 0.95  # 64 MiB of 4 KiB pages, at the high watermark
    assert row["exists"]["found"] == 50 * 128 and 0 < row["exists"]["p50_us"] <= row["exists"]["p99_us"]
    assert row["ssd_index_nbytes"] > 0 and row["bytes_per_entry"] > 0


def test_bench_scale_refuses_a_configuration_its_children_would_refuse(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "hicache_mooncake",
        "bench",
        "scale",
        "--dir",
        str(tmp_path),
        "--dram",
        "8MiB",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "tiers.dram: capacity (8388608) must be at least one slab_size" in proc.stderr
    assert "internal error" not in proc.stderr and list(tmp_path.iterdir()) == []
