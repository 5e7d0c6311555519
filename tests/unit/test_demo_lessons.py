"""What ``hicache-mooncake demo`` teaches is what happened: it loads the backend the way SGLang does
(SGLang's own extra-config parser, its ``StorageBackendFactory`` with ``dynamic``); it waits for
"background demotion" only when pages go to the SSD, and says so when none do; and each tier's row
counts the same region-reclaim evictions that the miss report lists (no ``evictions=0`` beside
"N evicted from the SSD by region reclaim")."""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hicache_mooncake import logs
from hicache_mooncake.cli import main

# Too small for the demo's 300 pages (so the SSD fills and reclaims regions), roomy for 40.
SMALL_DEMO = """
tiers:
  dram: {capacity: 32MiB, slab_size: 4MiB}
  ssd: {enabled: true, capacity: 48MiB, region_size: 4MiB, min_free: 64MiB}
"""


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``main()`` configures logging for a CLI process; undo it for the rest of the session."""
    ours = logging.getLogger(logs.LOGGER_NAME)
    level, host = ours.level, logs.host_level()
    yield
    ours.setLevel(level)
    logs.set_host_level(host)


def demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pages: int
) -> str:
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL_DEMO)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert main(["demo", "--config", str(cfg), "--pages", str(pages), "--layers", "2"]) == 0
    return capsys.readouterr().out


def test_few_pages_never_reach_the_ssd_and_the_demo_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = demo(tmp_path, monkeypatch, capsys, 40)
    # a file without the loader keys is one SGLang refuses: the demo says so before filling them in
    assert (
        f"warning: SGLang itself would refuse {tmp_path / 'small.yaml'} (Missing required field 'backend_name'"
        in out
    )
    assert "waiting for background demotion" not in out
    assert re.search(
        r"SSD tier: not used: all 40 pages \(10.0MiB\) fit in DRAM below its high watermark", out
    ), out
    assert (
        "made by SGLang's StorageBackendFactory ('dynamic', hicache_mooncake.backend.HiCacheMooncakeBackend)"
        in out
    )
    assert "all 40 pages found" in out


def test_tier_rows_count_the_region_reclaim_the_miss_report_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = demo(tmp_path, monkeypatch, capsys, 300)
    moved = re.search(r"SSD tier: (\d+) pages moved there from DRAM", out)
    assert moved is not None and int(moved[1]) > 0, out
    ssd_row = re.search(r"^  ssd .* evicted_by_region_reclaim=(\d+) dropped_by_policy=(\d+)", out, re.M)
    assert ssd_row is not None, out
    assert "evictions=0" not in out
    while_writing = re.search(r"^ +(\d+) evicted from the SSD by region reclaim while writing", out, re.M)
    # the row covers the whole demo (both phases); the report's line the write phase
    assert int(ssd_row[1]) >= (int(while_writing[1]) if while_writing else 0), out
    dropped = re.search(r"^ +(\d+) dropped by the placement policy", out, re.M)
    rows_dropped = sum(int(n) for n in re.findall(r"dropped_by_policy=(\d+)", out))
    assert rows_dropped >= (int(dropped[1]) if dropped else 0), out
