"""``hicache-mooncake bench ssd`` end to end on a tiny size: fio (best of its configurations), our
SSD-only backend, SGLang's ``file`` backend and aiofiles on one directory, every page read back checked, and
the backup + prefetch threads case; the JSON carries the keys other tools rely on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_bench_ssd_end_to_end(tmp_path: Path) -> None:
    out, png = tmp_path / "bench_ssd.json", tmp_path / "bench_ssd.png"
    work = tmp_path / "work"
    work.mkdir()
    cmd = [
        sys.executable, "-m", "hicache_mooncake", "bench", "ssd", "--json", str(out), "--plot", str(png),
        "--dir", str(work), "--total", "16MiB", "--batch-bytes", "16MiB", "--repeats", "1", "--disk-quiet-s", "0.2",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "set_ratio_vs_fio" in proc.stdout
    data = json.loads(out.read_text())
    assert png.stat().st_size > 0
    assert data["fio_engine"] in ("io_uring", "libaio", "psync")
    assert data["fio_iomem"] in ("shmhuge", "malloc")
    assert data["fio_iomem"] == "shmhuge" or data["fio_iomem_reason"]  # ordinary memory is explained
    tried = {
        "1 job x depth 16",
        "1 job x depth 32",
        "4 jobs x depth 1",
        "4 jobs x depth 16",
        "4 jobs x depth 32",
    }
    assert set(data["fio_configs_tried"]) == tried  # deep and shallow: more in flight is not always faster
    assert isinstance(data["cache_drop_ok"], bool)
    assert data["recover_within_bound"] is True
    assert data["disk_quiet_s"] == 0.2  # the smoke run says it waited less for the disk
    for size in ("1.0MiB", "8.0MiB"):
        row = data[size]
        for key in (
            "set_ratio_vs_fio", "get_ratio_vs_fio", "get_ratio_vs_sglang_file",
            "fio_set_gbps", "fio_get_gbps", "ours_set_gbps", "ours_get_gbps", "file_set_gbps",
            "file_get_gbps", "ours_set_cpu_s_per_gb", "ours_get_cpu_s_per_gb", "file_set_cpu_s_per_gb",
            "file_get_cpu_s_per_gb", "fio_set_cpu_s_per_gb", "fio_get_cpu_s_per_gb", "io_mode",
            "fio_engine", "cache_drop_ok", "reopen_verify_s", "reopen_headers_only_s",
            "fio_config", "fio_set_config", "fio_get_config", "fio_set_gbps_by_config",
            "steady_set_ratio_vs_fio", "ours_steady_set_gbps", "fio_overwrite_gbps", "fio_overwrite_config",
            "aiofiles_set_gbps", "aiofiles_get_gbps", "aiofiles_set_cpu_s_per_gb", "aiofiles_get_cpu_s_per_gb",
            "aiofiles_set_ratio_vs_fio", "aiofiles_get_ratio_vs_fio", "get_ratio_vs_aiofiles",
        ):  # fmt: skip
            assert key in row, key
        assert set(row["fio_set_gbps_by_config"]) == set(data["fio_configs_tried"])
        assert row["fio_set_gbps"] == pytest.approx(
            max(row["fio_set_gbps_by_config"].values()), rel=0.01
        ) or (data["repeats"] > 1)
        assert row["ours_bytes_ok"] is True and row["ours_bad_pages"] == 0 and row["file_bad_pages"] == 0
        # the same pages through aiofiles' thread pool, every one read back whole and compared
        assert row["aiofiles_bad_pages"] == 0 and row["aiofiles_missed_pages"] == 0
        assert row["aiofiles_set_ratio_vs_fio"] > 0 and row["aiofiles_get_ratio_vs_fio"] > 0
        assert row["pages_verified"] == row["pages"]  # every page of every get was compared
        conc = row["concurrency"]
        assert conc["bad_pages"] == 0 and conc["missed_pages"] == 0 and conc["failed_sets"] == 0
        # the threads run on a tier in its steady state, the stored pages untouched by its reclaim
        assert conc["steady_into_reused_regions"] is True and conc["warmup_pages"] > 0
        for key in ("backup_alone_gbps", "prefetch_alone_gbps", "together_gbps", "fio_mixed_gbps"):
            assert conc[key] > 0, key
        assert conc["repeats"] == data["repeats"] and len(conc["runs"]) == data["repeats"]
        assert row["ours_set_failed_pages"] == 0 and row["ours_get_missed_pages"] == 0
        # next to a busy Python thread: the same gets (checked alike) and more steady sets
        assert row["ours_busy_steady_set_failed_pages"] == 0
        assert row["ours_busy_get_gbps"] > 0 and row["ours_busy_steady_set_gbps"] > 0
        assert row["busy_get_ratio_vs_alone"] > 0 and row["busy_set_ratio_vs_alone"] > 0
        assert row["ours_steady_set_failed_pages"] == 0 and row["steady_set_ratio_vs_fio"] > 0
        assert row["steady_into_reused_regions"] is True  # filled until reclaim ran, whatever --total
        assert row["reopen_verify_all_recovered"] is True
        assert row["io_mode"] in ("direct", "buffered")
        assert all(row[k] > 0 for k in ("set_ratio_vs_fio", "get_ratio_vs_fio", "get_ratio_vs_sglang_file"))
    # nothing left behind in the measured directory
    assert list(work.iterdir()) == []


def test_the_concurrency_case_reports_medians_of_its_runs_and_sums_their_page_counts() -> None:
    """``bench ssd --repeats N`` runs the threads' case N times: one slow or fast run does not
    make the figure, and a bad page in any run shows."""
    from hicache_mooncake.tools.bench._ssd_concurrency import MEDIAN_FIELDS, SUM_FIELDS, summarize_runs

    def run(rate: float, bad: int, steady: bool = True) -> dict[str, Any]:
        r: dict[str, Any] = {k: rate for k in MEDIAN_FIELDS}
        r.update({k: 0 for k in SUM_FIELDS}, bad_pages=bad, steady_into_reused_regions=steady)
        r.update(threads_together={"backup": 1, "prefetch": 2}, targets={"aggregate_vs_one_thread": 1.5})
        r["together_prefetch_gbps"] = [rate, 2 * rate]
        return r

    runs = [run(1.0, 0), run(9.0, 1), run(2.0, 0, steady=False)]
    out = summarize_runs(runs)
    assert all(out[k] == 2.0 for k in MEDIAN_FIELDS)
    assert out["together_prefetch_gbps"] == [2.0, 4.0]
    assert out["bad_pages"] == 1 and out["steady_into_reused_regions"] is False
    assert out["repeats"] == 3 and out["runs"] == runs
    assert out["threads_together"] == {"backup": 1, "prefetch": 2}
