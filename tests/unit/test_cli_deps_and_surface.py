"""The CLI's surface as documented: ``--version`` and ``-v`` on either side of the subcommand;
``bench --help`` one line per target and each target's help a short description pointing at
docs/benchmarks-notes.md (which holds every target's method); benchmarks/README.md lists every
target the CLI has."""

from __future__ import annotations

import argparse
import pkgutil
import re
from pathlib import Path

import pytest

from hicache_mooncake.cli import build_parser, main, package_version
from hicache_mooncake.tools import bench

REPO = Path(__file__).resolve().parents[2]
TARGETS = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_"))


def test_verbose_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    assert parser.parse_args(["replay", "t.jsonl", "-v"]).verbose is True
    assert parser.parse_args(["bench", "ssd", "--verbose"]).verbose is True
    assert parser.parse_args(["-v", "replay", "t.jsonl"]).verbose is True  # not reset by the subparser
    assert parser.parse_args(["replay", "t.jsonl"]).verbose is False


@pytest.mark.parametrize("argv", [["--version"], ["replay", "--version"], ["bench", "ssd", "--version"]])
def test_version_anywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hicache-mooncake {package_version()}"


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_bench_help_is_one_line_per_target_and_notes_hold_the_rest() -> None:
    bench_parser = _subparsers(build_parser())["bench"]
    text = _help(bench_parser)
    listed = re.findall(r"^    (\w+)\s{2,}\S", text, re.M)
    assert listed == TARGETS, text
    assert len(text.splitlines()) <= 40, text
    notes = (REPO / "docs" / "benchmarks-notes.md").read_text()
    for name, target in _subparsers(bench_parser).items():
        description = _help(target).split("\n\n")[1:]  # after the usage block
        prose = "\n\n".join(description).split("options:")[0].strip()
        assert len(prose.splitlines()) <= 8, (name, prose)
        assert "docs/benchmarks-notes.md" in prose, name
        assert f"## `bench {name}`" in notes, name


def test_benchmarks_readme_lists_every_target() -> None:
    readme = (REPO / "benchmarks" / "README.md").read_text()
    missing = [t for t in TARGETS if f"`bench {t}`" not in readme]
    assert missing == [], missing
