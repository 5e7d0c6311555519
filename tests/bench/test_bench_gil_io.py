"""``bench gil_io``: Python I/O threads on a real file, alone and next to the loads SGLang's
process carries (a busy Python thread, hashing threads, busy processes, another switch interval).
What it must do: measure every case it is asked for, report ratios against ``alone`` from the
same run, and leave nothing behind: no file, no process it started, the switch interval as it was."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from hicache_mooncake.commands import UsageError
from hicache_mooncake.tools.bench import gil_io

RATES = ("write_gbps", "read_gbps", "mixed_write_gbps", "mixed_read_gbps", "mixed_gbps")


def _children() -> list[str]:
    """Command lines of this process's live children (from /proc)."""
    me, out = str(os.getpid()), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[1] == me:
                out.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
        except (OSError, IndexError):
            continue
    return out


def test_every_case_is_measured_against_alone_and_nothing_is_left_behind(tmp_path: Path) -> None:
    cases = ["alone", "busy_python", "hashing_threads_1", "cpu_processes_1", "busy_python_switch_20ms"]
    interval = sys.getswitchinterval()
    before = _children()
    result = gil_io.measure(str(tmp_path), cases, 1 << 20, 16 << 20, 2, drop=False)
    assert list(result["cases"]) == cases
    assert result["io_mode"] in ("direct", "buffered") and result["bytes_per_leg"] == 16 << 20
    alone = result["cases"]["alone"]
    for case in cases:
        row = result["cases"][case]
        assert all(row[k] > 0 for k in RATES), (case, row)
        assert row["mixed_gbps"] == pytest.approx(row["mixed_write_gbps"] + row["mixed_read_gbps"])
        for k in ("write", "read", "mixed"):
            assert row[f"{k}_ratio_vs_alone"] == pytest.approx(row[f"{k}_gbps"] / alone[f"{k}_gbps"])
    assert sys.getswitchinterval() == interval  # the 20 ms case restored it
    assert _children() == before  # the load process was stopped and reaped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.dat", "w.dat"]  # its two files only


def test_the_command_removes_its_directory_and_writes_json(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "g.json"
    args = argparse.Namespace(
        cases="alone", size_mib=1, total_mb=4, io_threads=2, dir=str(work), drop_caches=False,
        json_out=str(out), plot_out=None,
    )  # fmt: skip
    assert gil_io.run(args) == 0
    assert list(work.iterdir()) == []
    assert '"benchmark": "gil_io"' in out.read_text()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"cases": "alone,bogus"}, "bogus"),
        ({"cases": ""}, "(none given)"),
        ({"io_threads": 1}, "--io-threads"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_any_work(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    args = argparse.Namespace(
        cases="alone", size_mib=1, total_mb=4, io_threads=2, dir=str(tmp_path), drop_caches=False,
        json_out=None, plot_out=None,
    )  # fmt: skip
    for k, v in change.items():
        setattr(args, k, v)
    with pytest.raises(UsageError, match=named.replace("(", r"\(").replace(")", r"\)")):
        gil_io.run(args)
    assert list(tmp_path.iterdir()) == []
