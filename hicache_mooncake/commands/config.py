"""``hicache-mooncake config ACTION``: the YAML presets and configuration files.

``config path [NAME]`` prints the absolute path of a shipped preset (``default``, ``cluster``,
``mooncake``), so a launch line works from any directory and from a pip install:
``--hicache-storage-backend-extra-config @$(hicache-mooncake config path default)``. Without a
name it lists every preset with its path.

``config validate FILE...`` is the strongest check there is (``checks.validation``): SGLang's own
extra-config parsing of the file, then the backend's loader (``$HICACHE_MOONCAKE_CONFIG``
honoured as the backend honours it), the ``sglang:`` section against our tiers and this host's
memory, and this host (SSD directories and space, shared memory, ports), as ``launch`` does
(``--ranks``: scheduler processes per host); exit 1 when a file is refused. ``config show FILE``
prints the configuration the backend would run with, built-in values filled in, sizes with units.

Each action is a ``_register_<action>(actions)`` function below; a new action is one more.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from hicache_mooncake.checks.validation import env_override, validate_file
from hicache_mooncake.commands import UsageError
from hicache_mooncake.config import CONFIG_ENV, load_backend_config, load_config_file
from hicache_mooncake.config.display import sized_yaml
from hicache_mooncake.presets import preset_dir, preset_names
from hicache_mooncake.sizes import UNIT_RULE


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
        help="check YAML files as SGLang, the backend and `launch` would (exit 1 when one is refused)",
        description="The strongest check there is, offline. For each FILE: SGLang's own extra-config parsing "
        "(an empty file or one without backend_name / module_path / class_name is refused, as SGLang refuses "
        "it), the backend's loader (the YAML path of each bad key and the reason; $HICACHE_MOONCAKE_CONFIG "
        "honoured as the backend honours it), the sglang: section against our tiers and this host's memory, "
        "and this host (tiers.ssd.path absolute, creatable and writable, room for capacity x ranks + "
        "min_free; shared memory for the host cache's arena; ports free). Warnings and notes are printed; "
        "only errors refuse a file. Without FILE: the file $HICACHE_MOONCAKE_CONFIG names.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="YAML file (@ prefix allowed)")
    parser.add_argument(
        "--ranks", type=int, default=1, help="SGLang scheduler processes on this host (TP x PP x DP / nodes)"
    )
    parser.add_argument(
        "--against-running",
        action="store_true",
        help="also compare each file with the host cache service running on this host (its configuration wins: "
        "one line per key that differs, and whether tiers.host_cache: auto would join it)",
    )
    parser.set_defaults(func=_validate, exit_findings="a file is refused (its errors are printed)")


def _validate(args: argparse.Namespace) -> int:
    if args.ranks < 1:
        raise UsageError("--ranks must be at least 1")
    files = list(args.files) or ([os.environ[CONFIG_ENV]] if os.environ.get(CONFIG_ENV) else [])
    if not files:
        raise UsageError(f"name a FILE to check (or set ${CONFIG_ENV})")
    refused = 0
    for file in files:
        result = validate_file(file, args.ranks)
        for finding in result.findings:
            print(f"{file}: {finding}", file=sys.stderr if finding.level == "error" else sys.stdout)
        if getattr(args, "against_running", False) and result.config is not None:
            from hicache_mooncake.host_cache.authority import report_against_running

            for line in report_against_running(result.config):
                print(f"{file}: {line}")
        if result.refused:
            refused += 1
        else:
            print(f"{file}: ok (checked for {args.ranks} rank(s) on this host; --ranks N for more)")
    return 1 if refused else 0


def _register_show(actions: Any) -> None:
    parser = actions.add_parser(
        "show",
        help="print the configuration the backend would run with (built-in values filled in)",
        description="Load FILE as the backend would ($HICACHE_MOONCAKE_CONFIG honoured, as the backend "
        "honours it) and print every key with its effective value: the file's, or the built-in value of a "
        "key it leaves out (the schema's, not the preset named default). YAML shows sizes with units "
        "(capacity: 2GiB  # 2147483648 B; " + UNIT_RULE + "); --json gives bytes.",
    )
    parser.add_argument("file", metavar="FILE", help="YAML file (@ prefix allowed)")
    parser.add_argument("--json", action="store_true", help="print JSON (sizes in bytes) instead of YAML")
    parser.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    loaded = load_config_file(args.file)
    config = loaded.config
    other = env_override(loaded.path, os.environ)
    if other is not None:
        print(
            f"# ${CONFIG_ENV}={other} is set: the backend runs that file, shown here, not {loaded.path}",
            file=sys.stderr,
        )
        config = load_backend_config(loaded.data, source=str(loaded.path))
    if args.json:
        print(json.dumps(config.model_dump(mode="json"), indent=2))
    else:
        print(sized_yaml(config), end="")
    return 0
