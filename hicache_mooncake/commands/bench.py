"""``hicache-mooncake bench TARGET``: each module in ``hicache_mooncake.bench`` is a target.

A target module defines ``add_arguments(parser)`` and ``run(args) -> int``; the common options
(``--json OUT``, ``--plot OUT.png``) are added here for all of them, and ``--plot``'s dependency
(matplotlib) is checked before any work. No target installs anything or drops the page cache
unless a flag says so; each says what it skipped without it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
from typing import Any

from hicache_mooncake import bench
from hicache_mooncake.commands import UsageError


def register(sub: Any) -> None:
    parser = sub.add_parser("bench", help="run a benchmark (writes JSON + PNG, prints ratios)")
    targets = parser.add_subparsers(dest="target", metavar="TARGET")
    targets.required = True
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{bench.__name__}.{info.name}")
        doc = (module.__doc__ or "").strip().splitlines()
        target = targets.add_parser(info.name, help=doc[0] if doc else info.name, description=module.__doc__)
        target.add_argument("--json", dest="json_out", default=None, help="write results as JSON here")
        target.add_argument("--plot", dest="plot_out", default=None, help="write a PNG plot here")
        module.add_arguments(target)
        target.set_defaults(func=_runner(module))


def _runner(module: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        if args.plot_out and importlib.util.find_spec("matplotlib") is None:
            raise UsageError("--plot needs matplotlib (pip install 'hicache-mooncake[bench]')")
        return int(module.run(args) or 0)

    return run
