"""``hicache-mooncake bench TARGET``: each module in ``hicache_mooncake.tools.bench`` is a target.

A target module defines ``add_arguments(parser)`` and ``run(args) -> int``, ``REQUIRES`` (the
optional modules it imports: torch, sglang; ``hicache_mooncake.optional_deps``) where it needs
any, and ``replot(result, out)`` where it draws a figure (``--replot JSON --plot OUT`` redraws it
from its JSON, nothing measured, a JSON of another shape refused with exit status 2; a target
without one says that ``--plot`` is not written). The common options (``--json OUT``, ``--plot
OUT.png``) are added here for all of them; with ``--json`` the file also gets a ``host`` block
(``tools.host_probe``: the CPU model and a Python-loop and memcpy speed measured just before
and just after the run), so figures of runs on different hosts can be told apart. Its optional
modules, and ``--plot``'s (matplotlib), are checked before any work: a missing one is one line naming the extra to install, exit status 2. No target installs anything or drops the
page cache unless a flag says so; each says what it skipped without it.

Help stays short: ``bench --help`` lists one line per target, ``bench TARGET --help`` shows the
first paragraph of the target's docstring; the method and the measurements' narrative are in
``docs/benchmarks-notes.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.optional_deps import require

NOTES = "docs/benchmarks-notes.md"


def register(sub: Any) -> None:
    from hicache_mooncake.tools import bench  # tooling: imported by this entry point only

    parser = sub.add_parser(
        "bench",
        help="run a benchmark (writes JSON + PNG, prints ratios)",
        description=f"Run one benchmark. Method, caveats and past results: {NOTES}.",
    )
    targets = parser.add_subparsers(dest="target", metavar="TARGET")
    targets.required = True
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{bench.__name__}.{info.name}")
        target = targets.add_parser(
            info.name,
            help=summary_line(module.__doc__, info.name),
            description=short_description(module.__doc__),
        )
        target.add_argument("--json", dest="json_out", default=None, help="write results as JSON here")
        target.add_argument("--plot", dest="plot_out", default=None, help="write a PNG plot here")
        if hasattr(module, "replot"):
            target.add_argument(
                "--replot",
                metavar="JSON",
                default=None,
                help="no run: redraw --plot from a JSON this target wrote (--json)",
            )
        module.add_arguments(target)
        target.set_defaults(func=_runner(module))


def summary_line(doc: str | None, fallback: str) -> str:
    """The docstring's first line (the target's one line in ``bench --help``)."""
    lines = (doc or "").strip().splitlines()
    return lines[0].strip() if lines else fallback


def short_description(doc: str | None) -> str:
    """The docstring's first paragraph and where the rest is explained."""
    first = (doc or "").strip().split("\n\n")[0].strip()
    return f"{first}\n\nMethod, caveats and past results: {NOTES}."


def _runner(module: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        if getattr(args, "replot", None):
            return _replot(module, args)
        require(*getattr(module, "REQUIRES", ()))
        if args.plot_out and not hasattr(module, "replot"):
            print(f"(bench {args.target} draws no figure: --plot {args.plot_out} is not written)")
            args.plot_out = None
        if args.plot_out:
            require("matplotlib", needed_for="--plot")
        if not args.json_out:
            return int(module.run(args) or 0)
        from hicache_mooncake.tools import host_probe

        before = host_probe.speeds()
        status = int(module.run(args) or 0)
        _add_host(args.json_out, host_probe.host_block(before, host_probe.speeds()))
        return status

    return run


def _add_host(path: str, host: dict[str, Any]) -> None:
    """Add the ``host`` block (``tools.host_probe``) to the result file the target wrote
    (nothing when it wrote none, or not a JSON object: a failed run says why itself)."""
    from hicache_mooncake.tools.results_json import write_json

    try:
        with open(path, encoding="utf-8") as fh:
            result = json.load(fh)
    except (OSError, json.JSONDecodeError):
        return
    if isinstance(result, dict):
        result["host"] = host
        write_json(path, result)


def _replot(module: Any, args: argparse.Namespace) -> int:
    """``--replot JSON --plot OUT``: the target's figure from its JSON, nothing measured."""
    if not args.plot_out:
        raise UsageError("--replot needs --plot OUT.png")
    require("matplotlib", needed_for="--plot")
    try:
        with open(args.replot, encoding="utf-8") as fh:
            result = json.load(fh)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--replot {args.replot}: not JSON ({exc})") from None
    try:
        module.replot(result, args.plot_out)
    except (KeyError, TypeError, IndexError) as exc:
        raise UsageError(f"--replot {args.replot}: not a JSON this target wrote (missing {exc})") from None
    print(f"redrew {args.plot_out} from {args.replot}")
    return 0
