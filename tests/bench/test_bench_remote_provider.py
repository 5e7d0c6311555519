"""``bench remote --provider mooncake``: our tier over a real Mooncake Store next to the bare
Mooncake client in one run; the JSON carries both series, the two ratios and CPU s/GB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_provider_mooncake_reports_ratios_and_cpu_per_gb_for_both(tmp_path: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    cmd = [sys.executable, "-m", "hicache_mooncake", "bench", "remote", "--provider", "mooncake"]
    cmd += ["--sizes", "1MiB,2MiB", "--total-mib", "8", "--batch-mib", "4", "--repeats", "2"]
    cmd += ["--json", str(out), "--plot", str(png)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "ours/client: get" in p.stdout
    res = json.loads(out.read_text())
    assert png.stat().st_size > 0
    assert res["provider"] == "mooncake" and set(res["pages"]) == {"1MiB", "2MiB"}
    for entry in res["pages"].values():
        for series in ("mooncake_client", "ours"):
            assert entry[series]["get"] > 0 and entry[series]["put"] > 0
            assert len(entry[series]["get_samples"]) == 2
            assert entry[series]["get_cpu_s_per_gb"] > 0 and entry[series]["put_cpu_s_per_gb"] > 0
        assert entry["get_ratio_vs_mooncake_client"] > 0 and entry["put_ratio_vs_mooncake_client"] > 0
        calls = entry["ours"]["tier_stats"]["client"]
        assert calls["direct_puts"] > 0 and calls.get("staged_puts", 0) == 0  # zero copy, no staging
