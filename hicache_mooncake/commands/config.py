"""``hicache-mooncake config ACTION``: the YAML presets and configuration files.

``config path [NAME]`` prints the absolute path of a shipped preset (``default``, ``cluster``,
``mooncake``), so a launch line works from any directory and from a pip install:
``--hicache-storage-backend-extra-config @$(hicache-mooncake config path default)``. Without a
name it lists every preset with its path.

Each action is a ``_register_<action>(actions)`` function below; a new action is one more.
"""

from __future__ import annotations

import argparse
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.presets import preset_dir, preset_names


def register(sub: Any) -> None:
    parser = sub.add_parser("config", help="configuration files: where the presets are", description=__doc__)
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    actions.required = True
    _register_path(actions)


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
