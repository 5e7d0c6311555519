"""``hicache-mooncake fsck`` knows the failed-clear record (issue 48 follow-ups, item 3): a clear
whose new epoch could not be written leaves the SSD engine refusing every call until an operator
finishes it. fsck reports such a directory as not clean (exit 1) and names the repair;
``fsck --repair`` finishes the clear (``clear_record.repair``), after which a restarted engine
serves none of the cleared pages and takes new ones.

The clear fails for real: the engine's durable state write raises EIO (what a dying disk does),
with the record written where the engine writes it."""

from __future__ import annotations

import argparse
import errno
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.commands import fsck as fsck_command
from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.ssd.clear_record import RECORDS_ENV, find_failures
from hicache_mooncake.ssd.fsck import fsck
from hicache_mooncake.ssd.state import StateFile

PAGE = 64 << 10
MiB = 1 << 20
KEYS = [f"old{i:02d}" for i in range(24)]


def engine_in(d: Path) -> SsdEngine:
    engine = SsdEngine(SsdOptions(dirs=(str(d),), capacity_bytes=16 * MiB, region_size=MiB, direct_io="off"))
    assert engine.wait_recovered(60)
    return engine


def page(key: str) -> list[memoryview]:
    return [memoryview(np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8))]


def cli_main(argv: list[str]) -> int:
    """``hicache-mooncake fsck ...``: the command's own parser and run (as the CLI wires them)."""
    parser = argparse.ArgumentParser(prog="hicache-mooncake")
    fsck_command.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def served(engine: SsdEngine, keys: list[str]) -> list[str]:
    return [k for k in keys if engine.contains(k)]


@pytest.fixture
def failed_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An SSD directory whose clear could not write its new epoch (engine stopped)."""
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "records"))
    d = tmp_path / "ssd"
    d.mkdir()
    real_write = StateFile.write
    with engine_in(d) as e:
        for i in range(0, len(KEYS), 8):
            assert all(e.put_batch([(k, page(k)) for k in KEYS[i : i + 8]]))
        assert e.sync()

        def failing_disk(self: StateFile, state: Any, durable: bool = True) -> None:
            if durable:
                raise OSError(errno.EIO, "Input/output error")
            real_write(self, state, durable)

        monkeypatch.setattr(StateFile, "write", failing_disk)
        assert e.clear() is False
        monkeypatch.setattr(StateFile, "write", real_write)
    assert find_failures([str(d)])
    return d


def test_fsck_reports_a_failed_clear_and_names_the_repair(
    failed_clear: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = fsck([str(failed_clear)])
    assert not rep.clean and rep.failed_clears == find_failures([str(failed_clear)])
    assert cli_main(["fsck", str(failed_clear)]) == 1
    out = capsys.readouterr().out
    assert "FAILED CLEAR" in out and f"hicache-mooncake fsck --repair {failed_clear}" in out
    assert cli_main(["fsck", str(failed_clear), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["failed_clears"] == rep.failed_clears
    assert find_failures([str(failed_clear)])  # a check repairs nothing


def test_fsck_repair_finishes_the_clear(failed_clear: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["fsck", str(failed_clear), "--repair"]) == 0
    assert "clear finished" in capsys.readouterr().out
    assert find_failures([str(failed_clear)]) == []
    assert fsck([str(failed_clear)]).clean
    with engine_in(failed_clear) as e:  # not refused any more, and nothing cleared comes back
        assert served(e, KEYS) == []
        assert e.put_batch([("new", page("new"))]) == [True] and served(e, ["new"]) == ["new"]
