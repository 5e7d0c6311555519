"""``bench sglang``'s hybrid case runs end to end on a small workload (figures are not asserted:
performance is measured by the benchmark, not by tests)."""

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
