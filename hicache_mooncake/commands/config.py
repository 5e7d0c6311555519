"""``hicache-mooncake config ACTION``: the YAML presets and configuration files.

``config path [NAME]`` prints the absolute path of a shipped preset (``default``, ``cluster``,
``mooncake``), so a launch line works from any directory and from a pip install:
``--hicache-storage-backend-extra-config @$(hicache-mooncake config path default)``. Without a
name it lists every preset with its path.

``config validate FILE...`` checks files offline with the backend's own loader (the same messages:
each bad key's YAML path and the reason) and the ``sglang:`` section against our tiers and this
host's memory, as ``launch`` does (``--ranks``: scheduler processes per host); exit 1 when a file is
refused. ``config show FILE`` prints the configuration the backend would run with, defaults filled in.

Each action is a ``_register_<action>(actions)`` function below; a new action is one more.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from hicache_mooncake.commands import UsageError
from hicache_mooncake.config import ConfigError, load_config_file
from hicache_mooncake.launch_checks import check
from hicache_mooncake.presets import preset_dir, preset_names


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "config", help="configuration files: where the presets are, validate, show", description=__doc__
    )
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    actions.required = True
    _register_path(actions)
    _register_validate(actions)
    _register_show(actions)


def _register_path(actions: Any) -> None:
    parser = actions.add_parser(
        "path",
        help="print the absolute path of a shipped preset (all of them without NAME)",
        description="Print the absolute path of a shipped preset YAML, e.g. for "
        "--hicache-storage-backend-extra-config @$(hicache-mooncake config path default). "
        'Copy one to edit it (cp "$(hicache-mooncake config path default)" /etc/hicache.yaml).',
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help=f"preset name ({', '.join(preset_names())})")
    parser.set_defaults(func=_path)


def _path(args: argparse.Namespace) -> int:
    names = preset_names()
    if args.name is None:
        width = max(map(len, names), default=0)
        for name in names:
            print(f"{name:{width}s}  {preset_dir() / f'{name}.yaml'}")
        return 0
    name = args.name.removesuffix(".yaml")
    if name not in names:
        raise UsageError(f"no preset {args.name!r}; presets: {', '.join(names)}")
    print(preset_dir().resolve() / f"{name}.yaml")
    return 0


def _register_validate(actions: Any) -> None:
    parser = actions.add_parser(
        "validate",
        help="check YAML files offline, as the backend and `launch` would (exit 1 when one is refused)",
        description="Check each FILE with the backend's loader (the same messages: YAML path of each bad key "
        "and the reason) and its sglang: section against our tiers and this host's memory, as "
        "`hicache-mooncake launch` does. Warnings and notes are printed; only errors refuse a file.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML file (@ prefix allowed)")
    parser.add_argument(
        "--ranks", type=int, default=1, help="SGLang scheduler processes on this host (TP x PP x DP / nodes)"
    )
    parser.set_defaults(func=_validate, exit_findings="a file is refused (its errors are printed)")


def _validate(args: argparse.Namespace) -> int:
    if args.ranks < 1:
        raise UsageError("--ranks must be at least 1")
    refused = 0
    for file in args.files:
        try:
            loaded = load_config_file(file)
        except ConfigError as exc:
            print(f"{file}: {exc}", file=sys.stderr)
            refused += 1
            continue
        findings = check(loaded.config, args.ranks)
        for finding in findings:
            print(f"{file}: {finding}", file=sys.stderr if finding.level == "error" else sys.stdout)
        if any(f.level == "error" for f in findings):
            refused += 1
        else:
            print(f"{file}: ok")
    return 1 if refused else 0


def _register_show(actions: Any) -> None:
    parser = actions.add_parser(
        "show",
        help="print the configuration the backend would run with (defaults filled in)",
        description="Load FILE as the backend would and print every key with its effective value "
        "(sizes in bytes), as YAML or --json.",
    )
    parser.add_argument("file", metavar="FILE", help="YAML file (@ prefix allowed)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    parser.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    config = load_config_file(args.file).config.model_dump(mode="json")
    if args.json:
        print(json.dumps(config, indent=2))
    else:
        print(yaml.safe_dump(config, sort_keys=False), end="")
    return 0
