"""``hicache-mooncake`` / ``python -m hicache_mooncake``: one subcommand per module.

Every module in ``hicache_mooncake.commands`` that defines ``register(subparsers)`` becomes a
subcommand, so a new command is a new file. ``register`` adds its parser and sets ``func`` (a
callable taking the parsed ``argparse.Namespace`` and returning the exit code) and, when the
command can report findings, ``exit_findings`` (what exit status 1 means for it).

Exit status, the same for every command (and printed by every ``--help``): 0 success; 1 findings
(the command ran and found something wrong, e.g. corrupt entries); 2 usage or environment error
(bad arguments, an unreadable or invalid config, a missing file or optional dependency; the
message names it, no traceback); 70 internal error (a bug: the traceback is printed); 130
interrupted. Errors are one line on stderr, prefixed with the command.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
import textwrap
import traceback
from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

from hicache_mooncake import commands, logs
from hicache_mooncake.commands import UsageError
from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.optional_deps import MissingDependency, missing_from_import_error

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130
log = logging.getLogger("hicache_mooncake.cli")


def package_version() -> str:
    try:
        return metadata.version("hicache-mooncake")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def exit_codes_text(findings: str | None) -> str:
    lines = ["exit status:", "  0   success"]
    if findings:
        lines.append(f"  1   findings: {findings}")
    lines += [
        "  2   usage or environment error (bad arguments, unreadable or invalid config, missing file",
        "      or optional dependency); one line on stderr names it",
        "  70  internal error (a bug; the traceback is printed)",
    ]
    return "\n".join(lines)


class HelpFormatter(argparse.HelpFormatter):
    """Wraps prose paragraphs; keeps lists, indented blocks and the exit-status table as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in textwrap.dedent(text).strip().split("\n\n"):
            lines = para.splitlines()
            if any(ln[:1].isspace() or ln.lstrip()[:2] in ("- ", "* ") for ln in lines) or (
                lines and lines[0].endswith(":")
            ):
                out.append("\n".join(indent + ln for ln in lines))
            else:
                out.append(super()._fill_text(para, width, indent))
        return "\n\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hicache-mooncake",
        description="Tiered KV-cache storage backend for SGLang HiCache (DRAM, remote DRAM pool, SSD).",
    )
    _add_global_options(parser, default=False)
    parser.set_defaults(exit_findings="the command found something wrong (see its --help)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    for each in _all_parsers(parser):
        if each is not parser:  # before or after the subcommand: `bench ssd -v`, `demo --version`
            _add_global_options(each, default=argparse.SUPPRESS)
        each.formatter_class = HelpFormatter
        text = exit_codes_text(each.get_default("exit_findings"))
        each.epilog = f"{each.epilog}\n\n{text}" if each.epilog else text
    return parser


def _add_global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """``--version`` and ``-v``. On a subcommand's parser ``-v`` defaults to SUPPRESS, so a
    ``-v`` given before the subcommand is not reset by the subcommand's parser."""
    parser.add_argument("--version", action="version", version=f"hicache-mooncake {package_version()}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="debug logging of hicache-mooncake's own loggers (libraries stay at warnings)",
    )


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from _all_parsers(child)


def configure_logging(verbose: bool) -> None:
    """Libraries log warnings and up; our loggers INFO (DEBUG with ``-v``). A backend the command
    builds keeps that level unless its YAML sets ``log_level``."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logs.set_host_level(logging.DEBUG if verbose else logging.INFO)
    logs.install()
    logs.apply_level(logs.UNSET)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    name = " ".join(
        ["hicache-mooncake", args.command, *([args.target] if getattr(args, "target", None) else [])]
    )
    log.debug("%s %s (python %s)", name, package_version(), sys.version.split()[0])
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UsageError, MissingDependency) as exc:
        _error(name, str(exc), args.verbose)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:  # a command that forgot to ``require`` an optional module
        missing = missing_from_import_error(exc)
        if missing is None:
            return _internal_error(name)
        _error(name, str(missing), args.verbose)
        return EXIT_USAGE
    except OSError as exc:  # the environment: a path, a permission, a port, a full disk
        _error(name, str(exc), args.verbose)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        return _internal_error(name)
    finally:
        logs.flush()


def _internal_error(name: str) -> int:
    traceback.print_exc()
    print(f"{name}: internal error (a bug; please report the traceback above)", file=sys.stderr)
    return EXIT_INTERNAL


def _error(name: str, message: str, verbose: bool) -> None:
    if verbose:
        traceback.print_exc()
    print(f"{name}: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
