"""``tools/bench/_cold_path.py``: the warm and cold cost of each step of a DRAM get, on SGLang's own
host pool. What a reader of its table relies on: every step is timed both ways, the whole call is
one that served its pages, and an eviction between calls shows as a slower call."""

from __future__ import annotations

import pytest

from hicache_mooncake.tools.bench._cold_path import measure

pytestmark = pytest.mark.integration


def test_each_step_of_a_dram_get_is_timed_warm_and_cold_and_an_eviction_slows_the_call() -> None:
    out = measure(pages=4, page_kib=64, evict_mib=32, repeats=7)
    steps = out["steps"]
    assert "whole batch_get_v1" in steps and len(steps) >= 10
    for name, figures in steps.items():
        assert figures["warm_us"] > 0 and figures["cold_us"] > 0, name
    whole = steps["whole batch_get_v1"]
    # 2-3x on the project's VM; a cold call is never the faster one
    assert whole["cold_us"] > whole["warm_us"], whole
    parts = sum(f["warm_us"] for n, f in steps.items() if not n.startswith("whole"))
    assert parts < whole["warm_us"] * 2, (parts, whole)  # the steps are parts of the call, not more
