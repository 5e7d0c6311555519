"""``docs/performance.md`` and the README's measured comparison are generated from
``benchmarks/results/*.json`` (``scripts/gen_performance_doc.py``) and stay current: a new or
changed result without a regenerated page fails here, and every figure carries its date, commit
and machine (issue 46)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen_performance_doc.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_performance_doc", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_performance_page_is_current_with_the_results() -> None:
    gen = generator()
    page = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    fresh = gen.render_page(REPO, gen.recorded_in(page), use_git=False)
    assert page == fresh, "stale: run python scripts/gen_performance_doc.py (after committing the results)"
    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        assert f"`{path.name}` — command:" in page, f"{path.name} has no section"


def test_readme_comparison_is_current_with_the_results() -> None:
    gen = generator()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    page = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    block = gen.render_readme_block(REPO, gen.recorded_in(page), use_git=False)
    assert block in readme, "stale: run python scripts/gen_performance_doc.py"
    assert "Mooncake" in block and "measured" in block


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _repo_with(tmp_path: Path, results: dict[str, dict[str, object]]) -> Path:
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# x\n\n<!-- performance-comparison:begin (generated: python scripts/gen_performance_doc.py) -->\n"
        "<!-- performance-comparison:end -->\n",
        encoding="utf-8",
    )
    for name, data in results.items():
        (tmp_path / "benchmarks" / "results" / name).write_text(json.dumps(data), encoding="utf-8")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "results")
    return tmp_path


def _check(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(repo), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_new_result_without_a_regenerated_page_fails_the_check(tmp_path: Path) -> None:
    sglang = {"benchmark": "sglang", "set_ratio_vs_file": 3.5, "get_ratio_vs_file": 2.25, "per_page_size": []}
    repo = _repo_with(tmp_path, {"bench_sglang.json": sglang})
    assert _check(repo).returncode == 1  # nothing generated yet
    subprocess.run([sys.executable, str(SCRIPT), "--repo", str(repo)], check=True, timeout=60)
    assert _check(repo).returncode == 0
    page = (repo / "docs" / "performance.md").read_text(encoding="utf-8")
    sha = _git(repo, "log", "-1", "--format=%h")
    assert f"commit `{sha}` (from git log)" in page  # no date field in the file: the commit that recorded it
    assert "| set vs SGLang's `file` backend | 3.50 |" in page
    assert "set 3.50x, get 2.25x" in (repo / "README.md").read_text(encoding="utf-8")

    ssd = {"benchmark": "ssd", "date": "2026-12-05", "commit": "abc1234", "machine": "an NVMe host"}
    (repo / "benchmarks" / "results" / "bench_ssd.json").write_text(json.dumps(ssd), encoding="utf-8")
    stale = _check(repo)
    assert stale.returncode == 1 and "docs/performance.md is stale" in stale.stderr
    subprocess.run([sys.executable, str(SCRIPT), "--repo", str(repo)], check=True, timeout=60)
    page = (repo / "docs" / "performance.md").read_text(encoding="utf-8")
    assert "measured: 2026-12-05, commit `abc1234` (from the file); machine: an NVMe host." in page
    assert _check(repo).returncode == 0

    sglang["set_ratio_vs_file"] = 4.0  # a result rerun in place: same name, new bytes
    (repo / "benchmarks" / "results" / "bench_sglang.json").write_text(json.dumps(sglang), encoding="utf-8")
    assert _check(repo).returncode == 1


def test_the_check_needs_no_git_history(tmp_path: Path) -> None:
    """A shallow clone or a copy without ``.git`` checks the committed page the same way."""
    copy = tmp_path / "copy"
    for rel in ("benchmarks/results", "docs"):
        shutil.copytree(REPO / rel, copy / rel)
    shutil.copy(REPO / "README.md", copy / "README.md")
    done = _check(copy)
    assert done.returncode == 0, done.stderr


def test_the_page_reads_no_clock(tmp_path: Path) -> None:
    gen = generator()
    repo = _repo_with(tmp_path, {"bench_x.json": {"ratio": 1.5, "cpu_count": 2}})
    first = gen.render_page(repo)
    assert first == gen.render_page(repo)
    assert "| `ratio` | 1.50 |" in first and "a 2-CPU VM of this project" in first


def test_the_machine_names_the_cpu_and_its_reference_speeds(tmp_path: Path) -> None:
    """A result with the ``host`` block that ``bench --json`` adds: the page says which CPU the
    run had and how fast it was before and after (VM hosts change between hours)."""
    gen = generator()
    probe = {"python_loops_per_s": 56.2e6, "memcpy_gbps": 13.34, "load_average_1m": 0.5}
    host = {
        "cpu_model": "Some CPU @ 2.0GHz",
        "cpu_count": 2,
        "before": probe,
        "after": {**probe, "memcpy_gbps": 22.5},
    }
    repo = _repo_with(tmp_path, {"bench_x.json": {"ratio": 1.5, "cpu_count": 2, "host": host}})
    page = gen.render_page(repo)
    assert (
        "a 2-CPU VM of this project (Some CPU @ 2.0GHz: 56M Python loops/s and memcpy at 13.3 GB/s "
        "before the run, 56M Python loops/s and memcpy at 22.5 GB/s after)"
    ) in page
