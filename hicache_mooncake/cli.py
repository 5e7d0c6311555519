"""``hicache-mooncake`` / ``python -m hicache_mooncake``: one subcommand per module.

Every module in ``hicache_mooncake.commands`` that defines ``register(subparsers)`` becomes a
subcommand, so a new command is a new file. ``register`` adds its parser and sets ``func`` (a
callable taking the parsed ``argparse.Namespace`` and returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

from hicache_mooncake import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hicache-mooncake",
        description="Tiered KV-cache storage backend for SGLang HiCache (DRAM, remote DRAM pool, SSD).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    code = args.func(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
