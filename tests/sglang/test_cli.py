"""The CLI a user types: every subcommand has --help, `stats` reads a live backend's metrics, the
demo cleans up after itself and explains every page it did not find."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake import logs
from hicache_mooncake.cli import main

pytestmark = pytest.mark.sglang

# A partial config (no loader keys) too small for the demo's pages: some are dropped or evicted.
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


@pytest.mark.parametrize("command", ["demo", "bench", "replay", "fsck", "node", "stats", "config", "launch"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "usage: hicache-mooncake" in capsys.readouterr().out


def test_module_entry_point_matches_the_console_script():
    out = subprocess.run(
        [sys.executable, "-m", "hicache_mooncake", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "demo" in out.stdout and "replay" in out.stdout


def test_stats_prints_the_tiers_of_a_running_backend(capsys):
    extra = small_extra()
    extra["metrics"] = {"port": 0}
    backend, host = make_backend(extra=extra)
    try:
        backend.batch_set_v1([f"{i:064x}" for i in range(3)], host.alloc(3 * SMALL.page_size))
        assert main(["stats", "--url", f"http://127.0.0.1:{backend.metrics_port}/metrics"]) == 0
        out = capsys.readouterr().out
        assert any(line.split()[:3] == ["0", "dram", "3"] for line in out.splitlines())
        assert "rank 0: pages set ok 3" in out
    finally:
        backend.close()
    assert (
        main(["stats", "--url", f"http://127.0.0.1:{backend.metrics_port}/metrics", "--timeout", "0.5"]) == 2
    )


def test_demo_uses_its_own_temp_dir_and_explains_every_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL_DEMO)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert main(["demo", "--config", str(cfg), "--pages", "300", "--layers", "2"]) == 0
    out = capsys.readouterr().out
    where = re.search(r"SSD tier: (\d+) files, (\S+) on disk in (\S+); removed \(--keep keeps it\)", out)
    assert where is not None and int(where[1]) > 0 and where[3].startswith(str(tmp)), out
    assert list(tmp.iterdir()) == []  # removed
    assert "byte check: OK" in out
    found = int(re.search(r"get: (\d+)/300 pages found", out)[1])  # type: ignore[index]
    assert 0 < found < 300, out
    report = out.split("not found: ")[1]
    assert report.startswith(f"{300 - found} of 300 pages")
    explained = sum(int(n) for n in re.findall(r"^ +(\d+) ", report, re.M))
    assert explained == 300 - found and "not accounted" not in report, out


def test_demo_keep_keeps_the_ssd_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL_DEMO)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert main(["demo", "--config", f"@{cfg}", "--pages", "40", "--layers", "2", "--keep"]) == 0
    out = capsys.readouterr().out
    (kept,) = tmp.iterdir()
    assert f"in {kept}; kept" in out and "all 40 pages found" in out
    assert any(p.is_file() for p in kept.rglob("*"))
