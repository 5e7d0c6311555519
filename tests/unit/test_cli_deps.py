"""A missing optional dependency is the user's environment, not our bug: every command checks the
modules it needs before any work and exits 2 with one line naming the extra to install (the exit
status contract of ``hicache-mooncake --help``), never a traceback and "internal error" (70).

The commands run in a real interpreter that cannot import the module: a ``sitecustomize`` puts a
finder first on ``sys.meta_path`` that answers as Python does for a module that is not installed.
One interpreter runs every command of a case through the CLI's ``main`` (its stderr captured per
command), so the cases share one start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HIDE = """
import os, sys

_HIDDEN = set(os.environ["HIDE_MODULES"].split(","))


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""

RUN_EACH = """
import contextlib, io, json, sys
from hicache_mooncake.cli import main

results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    results.append({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""


def run_cli(tmp_path: Path, hidden: str, commands: list[list[str]]) -> list[dict[str, object]]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE)
    work = tmp_path / "tmp"
    work.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "HIDE_MODULES": hidden,
        "TMPDIR": str(work),
    }
    out = subprocess.run(
        [sys.executable, "-c", RUN_EACH, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def one_line(result: dict[str, object]) -> str:
    assert result["code"] == 2, result
    err = str(result["stderr"])
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_commands_that_need_torch_say_so_in_one_line_before_any_work(tmp_path: Path) -> None:
    commands = [["demo"], ["bench", "sglang"], ["bench", "scale"], ["bench", "ssd"]]
    for result in run_cli(tmp_path, "torch", commands):
        name = " ".join(result["argv"])  # type: ignore[arg-type]
        assert one_line(result) == (
            f"hicache-mooncake {name}: needs torch, which is not installed: pip install 'hicache-mooncake[sglang]'"
        )
        assert result["stdout"] == "", result  # nothing ran before the check: no fio, no config
    assert list((tmp_path / "tmp").iterdir()) == []  # no work directory made


def test_missing_sglang_redis_or_matplotlib_names_its_extra(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"hash_ids": [1, 2]}\n')
    demo, node, replay = run_cli(
        tmp_path,
        "sglang,redis,matplotlib",
        [
            ["demo"],
            ["node", "--config", str(REPO / "configs" / "cluster.yaml"), "--port", "0"],
            ["replay", str(trace), "--plot", str(tmp_path / "p.png")],
        ],
    )
    assert one_line(demo) == (
        "hicache-mooncake demo: needs sglang, which is not installed: pip install 'hicache-mooncake[sglang]'"
    )
    assert one_line(node) == (
        "hicache-mooncake node: metadata.backend: redis needs redis, which is not installed: "
        "pip install 'hicache-mooncake[cluster]'"
    )
    assert one_line(replay) == (
        "hicache-mooncake replay: --plot needs matplotlib, which is not installed: "
        "pip install 'hicache-mooncake[bench]'"
    )
    assert not (tmp_path / "p.png").exists()
