"""What a new user meets at the command line (no SGLang needed here): ``--version``; ``-v`` for our
loggers only; exit codes in every ``--help`` and as documented; one config loader and one wording
for every command, no traceback for a bad file; ``config path`` from anywhere; ``replay`` and
``bench`` checking optional dependencies first, writing JSON first, no bar into a non-terminal;
disk benchmarks measuring in the temp dir and dropping no page cache unless asked."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hicache_mooncake import cli, logs
from hicache_mooncake.cli import main
from hicache_mooncake.config import load_config_file
from hicache_mooncake.tools.bench import _disk
from hicache_mooncake.tools.replay.trace import TraceShape, generate_trace, write_trace

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``main()`` configures logging for a CLI process; undo it for the rest of the session."""
    ours = logging.getLogger(logs.LOGGER_NAME)
    level, host = ours.level, logs.host_level()
    yield
    ours.setLevel(level)
    logs.set_host_level(host)


def run_cli(
    *argv: str, cwd: Path | None = None, env: dict[str, str] | None = None, pre: str = ""
) -> subprocess.CompletedProcess[str]:
    """``python -m hicache_mooncake ARGV`` in a fresh process (``pre``: Python run first)."""
    code = f"{pre}\nimport sys\nfrom hicache_mooncake.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    write_trace(path, generate_trace(TraceShape(conversations=120), seed=3))
    return path


# ------------------------------------------------------------------ version, help, exit codes


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hicache-mooncake {cli.package_version()}"


def test_every_help_documents_the_exit_codes() -> None:
    parsers = list(cli._all_parsers(cli.build_parser()))
    assert len(parsers) > 10  # the top level, every command, every bench target and config action
    for parser in parsers:
        text = parser.format_help()
        assert "exit status:\n  0   success" in text, parser.prog
        assert "  2   usage or environment error" in text and "  70  internal error" in text, parser.prog
    findings = {p.prog: p.format_help() for p in parsers}
    assert "1   findings: corrupt or torn entries" in findings["hicache-mooncake fsck"]
    assert "1   findings: a page read back differs" in findings["hicache-mooncake demo"]
    assert "1   findings" not in findings["hicache-mooncake config path"]


def _bad_files(tmp: Path) -> dict[str, tuple[Path, str]]:
    files = {
        "missing": (tmp / "nope.yaml", "does not exist"),
        "bad YAML": (tmp / "bad.yaml", "is not valid YAML"),
        "not a mapping": (tmp / "list.yaml", "the top level must be a mapping"),
        "typo": (tmp / "typo.yaml", "node.prot: unknown key"),
        "bad value": (tmp / "value.yaml", "tiers.dram.capacity: invalid size 'lots'"),
    }
    files["bad YAML"][0].write_text("tiers: [unclosed\n")
    files["not a mapping"][0].write_text("- a\n- b\n")
    files["typo"][0].write_text("node:\n  prot: 7700\n")
    files["bad value"][0].write_text("tiers:\n  dram:\n    capacity: lots\n")
    return files


@pytest.mark.parametrize("command", ["demo", "node"])
def test_bad_config_files_one_wording_no_traceback(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command that takes a YAML loads it with the backend's loader: same message, exit 2."""
    for what, (path, message) in _bad_files(tmp_path).items():
        for arg in (str(path), f"@{path}"):
            assert main([command, "--config", arg]) == 2, what
            err = capsys.readouterr().err
            assert message in err, (what, err)
            assert "Traceback" not in err and "Extra inputs are not permitted" not in err
            assert err.startswith(f"hicache-mooncake {command}: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["config", "path", "nope"], "no preset 'nope'; presets: cluster, default, mooncake"),
        (["replay", "/nonexistent/trace.jsonl"], "cannot read trace"),
        (["replay", "TRACE", "--policy", "nope"], "unknown policy 'nope'"),
        (["replay", "TRACE", "--capacity-fraction", "0"], "--capacity-fraction > 0"),
        (["stats", "--url", "http://127.0.0.1:9/metrics", "--timeout", "0.5"], "cannot read"),
        (["bench", "sglang", "--sizes", "3MiB"], "unsupported page size"),
    ],
)
def test_usage_and_environment_errors_exit_2(
    argv: list[str], message: str, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(trace) if a == "TRACE" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["replay"])
    assert info.value.code == 2


def test_a_bug_exits_70_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: object) -> int:
        raise RuntimeError("a bug")

    parser = cli.build_parser()
    for each in cli._all_parsers(parser):
        if each.prog == "hicache-mooncake config path":
            each.set_defaults(func=boom)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert main(["config", "path", "default"]) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug" in err and "internal error" in err


# ------------------------------------------------------------------ config path


def test_config_path_works_from_any_directory(tmp_path: Path) -> None:
    one = run_cli("config", "path", "default", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    path = Path(one.stdout.strip())
    assert path.is_absolute() and path.name == "default.yaml"
    assert load_config_file(f"@{path}").config.tiers.ssd.enabled  # what SGLang will be given
    listing = run_cli("config", "path", cwd=tmp_path)
    names = [line.split()[0] for line in listing.stdout.splitlines()]
    assert names == ["cluster", "default", "mooncake"]
    assert all(Path(line.split()[1]).is_file() for line in listing.stdout.splitlines())


def test_readme_launch_line_works_from_anywhere() -> None:
    readme = (REPO / "README.md").read_text()
    assert "--hicache-storage-backend-extra-config @$(hicache-mooncake config path default)" in readme
    assert "extra-config @configs/" not in readme
    operations = (REPO / "docs" / "operations.md").read_text()
    for route in ("GET", "POST", "/hicache/storage-backend/clear"):
        assert route in operations


# ------------------------------------------------------------------ node


def test_node_takes_an_at_file_and_drains_on_sigterm(tmp_path: Path) -> None:
    cfg = tmp_path / "node.yaml"
    cfg.write_text(yaml.safe_dump({"node": {"port": 0, "capacity": "16MiB", "shm": False}}))
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_mooncake", "node", "--config", f"@{cfg}", "--ready-file", str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "no ready file"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------ logging


def test_verbose_is_for_our_loggers_only(trace: Path, tmp_path: Path) -> None:
    out = run_cli("-v", "replay", str(trace), "--plot", str(tmp_path / "p.png"))
    assert out.returncode == 0, out.stderr
    assert "DEBUG hicache_mooncake.cli" in out.stderr
    assert "DEBUG matplotlib" not in out.stderr and "DEBUG PIL" not in out.stderr
    assert "DEBUG" not in run_cli("replay", str(trace)).stderr


# ------------------------------------------------------------------ replay


def test_replay_needs_matplotlib_for_plot_before_any_work(trace: Path, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    out = run_cli(
        "replay", str(trace), "--json", str(out_json), "--plot", str(tmp_path / "r.png"),
        pre="import sys; sys.modules['matplotlib'] = None",
    )  # fmt: skip
    assert out.returncode == 2 and "--plot needs matplotlib" in out.stderr
    assert not out_json.exists() and "Traceback" not in out.stderr


def test_replay_writes_json_before_plotting(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "r.json"
    assert (
        main(["replay", str(trace), "--json", str(out_json), "--plot", str(tmp_path / "no" / "r.png")]) == 2
    )
    result = json.loads(out_json.read_text())
    assert result["requests"] > 0
    assert set(result["sweep"]) == {"fraction", "policy", "lru", "opt"}
    assert "Traceback" not in capsys.readouterr().err


def test_replay_of_an_empty_trace_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for text in ("", "\n\n", '{"hash_ids": []}\n'):
        empty = tmp_path / "empty.jsonl"
        empty.write_text(text)
        assert main(["replay", str(empty)]) == 2
        assert "nothing to replay" in capsys.readouterr().err


def test_replay_progress_bar_labelled_counts_requests_only_on_a_terminal(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = len(generate_trace(TraceShape(conversations=120), seed=3))

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(["replay", str(trace), "--plot", str(tmp_path / "p.png")]) == 0
    bars = term.getvalue()
    assert "replay 1/7 (reuse at 0.05, sim)" in bars and "replay 7/7 (sweep: reuse at 0.4)" in bars
    # each run's bar counts that run's requests; none counts all seven runs as one total (the
    # denominator, not a rate such as "1785.63req/s" that can hold the same digits)
    totals = {int(total) for total in re.findall(r"\| *\d+/(\d+) \[", bars)}
    assert f"{requests}/{requests}" in bars and totals == {requests}
    assert "req/s" in bars or " req" in bars
    # not a terminal (a log file, a pipe): no bar at all
    out = run_cli("replay", str(trace))
    assert out.returncode == 0 and out.stderr == ""


# ------------------------------------------------------------------ bench


def test_bench_flags_and_defaults_are_explicit() -> None:
    helps = {p.prog: p.format_help() for p in cli._all_parsers(cli.build_parser())}
    for target in ("ssd", "ssd_engine", "gil_io"):
        assert "--drop-caches" in helps[f"hicache-mooncake bench {target}"]
    remote = helps["hicache-mooncake bench remote"]
    assert "--pip-install-mooncake" in remote and "--apt-install-ibverbs" in remote
    work = Path(_disk.default_work_dir())
    assert work in (Path(tempfile.gettempdir()), Path("/var/tmp"))
    import hicache_mooncake.tools.bench as bench_pkg

    assert Path(bench_pkg.__file__).resolve().parents[1] not in work.resolve().parents


def test_disk_bench_uses_the_temp_dir_and_drops_no_cache_by_default(tmp_path: Path) -> None:
    out_json = tmp_path / "out" / "e.json"
    out_json.parent.mkdir()
    work = tmp_path / "tmp"
    work.mkdir()
    out = run_cli(
        "bench", "ssd_engine", "--sizes", "1", "--total-mb", "8", "--modes", "buffered",
        "--region-mb", "4", "--json", str(out_json), env={"TMPDIR": str(work)}, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "page cache NOT dropped" in out.stdout and "--drop-caches" in out.stdout
    result = json.loads(out_json.read_text())
    (row,) = result["results"]
    assert row["page_cache_dropped"] is False and row["bytes_ok"] is True
    # what the host could do around the run: runs on different VM hosts can be told apart
    host = result["host"]
    assert host["cpu_count"] == os.cpu_count() and host["cpu_model"]
    for probe in (host["before"], host["after"]):
        assert probe["python_loops_per_s"] > 1e6 and probe["memcpy_gbps"] > 0.1
    assert list(work.iterdir()) == []  # measured there, nothing left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tmp"]  # nothing in the cwd


def test_bench_plot_needs_matplotlib_before_any_work(tmp_path: Path) -> None:
    out = run_cli(
        "bench", "gil_io", "--plot", str(tmp_path / "p.png"), "--json", str(tmp_path / "e.json"),
        pre="import sys; sys.modules['matplotlib'] = None",
    )  # fmt: skip
    assert out.returncode == 2 and "--plot needs matplotlib" in out.stderr
    assert not (tmp_path / "e.json").exists()
