"""The CLI a user types: every subcommand has --help, `stats` reads a live backend's metrics."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake.cli import main

pytestmark = pytest.mark.sglang


@pytest.mark.parametrize("command", ["demo", "bench", "replay", "fsck", "node", "stats"])
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
        assert "dram" in out and "pages set  ok      3" in out
    finally:
        backend.close()
    assert (
        main(["stats", "--url", f"http://127.0.0.1:{backend.metrics_port}/metrics", "--timeout", "0.5"]) == 2
    )
