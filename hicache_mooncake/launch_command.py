"""SGLang's command line for one YAML: ``python -m sglang.launch_server`` with HiCache on, our backend
wired in through SGLang's ``dynamic`` loader (the YAML's absolute path as the extra config, which
carries the loader keys), the ``sglang:`` section's flags, then the operator's own arguments.

Everything is held against SGLang's own argument parser (``ServerArgs.add_cli_args``): a flag it
does not know, or an operator argument that changes a value the YAML sets, is refused with the
YAML key to change (``LaunchError``) instead of failing later inside SGLang.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hicache_mooncake.config import LoadedConfig
from hicache_mooncake.config.sglang_section import SglangSection, flag_of

SERVER_MODULE = "sglang.launch_server"
EXTRA_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
"""SGLang reads ``@FILE`` by its extension (and TOML, which is not YAML)."""


class LaunchError(Exception):
    """The command line cannot be built as asked (the message names what to change)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit
        raise LaunchError(f"SGLang's argument parser refuses the command line: {message}")


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang's own ``launch_server`` argument parser (imports SGLang, and torch with it)."""
    try:
        from sglang.srt.server_args import ServerArgs
    except ImportError as exc:
        raise LaunchError(f"SGLang is not installed in this Python ({sys.executable}): {exc}") from None
    parser = _Parser(prog=SERVER_MODULE)
    ServerArgs.add_cli_args(parser)
    return parser


@dataclass(frozen=True)
class LaunchCommand:
    argv: list[str]
    """The whole command: the interpreter, ``-m sglang.launch_server`` and every argument."""
    args: argparse.Namespace
    """``argv`` as SGLang's parser reads it."""

    @property
    def server_args(self) -> list[str]:
        return self.argv[3:]

    def ranks_per_host(self) -> int:
        """Scheduler processes of this server on one host: TP x PP x DP replicas / nodes
        (dp-attention groups live inside TP)."""
        ns = self.args
        dp = 1 if getattr(ns, "enable_dp_attention", False) else int(getattr(ns, "dp_size", 1) or 1)
        total = int(ns.tp_size) * int(getattr(ns, "pp_size", 1) or 1) * dp
        return max(total // max(int(getattr(ns, "nnodes", 1) or 1), 1), 1)


def our_flags(loaded: LoadedConfig) -> list[str]:
    """What the YAML contributes: HiCache on, the backend, the ``sglang:`` section."""
    path = loaded.path.resolve()
    if path.suffix.lower() not in EXTRA_CONFIG_SUFFIXES:
        raise LaunchError(
            f"{path}: SGLang reads --hicache-storage-backend-extra-config @FILE by its extension; "
            f"name the file *.yaml (it has {path.suffix or 'none'})"
        )
    section = loaded.config.sglang or SglangSection()
    return [
        "--enable-hierarchical-cache",
        "--hicache-storage-backend",
        "dynamic",
        "--hicache-storage-backend-extra-config",
        f"@{path}",
        *section.flags(),
    ]


def build(loaded: LoadedConfig, rest: Sequence[str], python: str = sys.executable) -> LaunchCommand:
    """The command for ``loaded`` plus the operator's ``rest``; LaunchError when SGLang's parser
    refuses it or ``rest`` overrides a value the YAML sets."""
    ours = our_flags(loaded)
    parser = sglang_parser()
    argv = [python, "-m", SERVER_MODULE, *ours, *rest]
    args = parser.parse_args(argv[3:])
    wanted = parser.parse_args([*ours, "--model-path", "-"])
    for dest, key in _owned(loaded.config.sglang, parser):
        if getattr(args, dest) != getattr(wanted, dest):
            raise LaunchError(
                f"the command line sets {dest.replace('_', '-')} = {getattr(args, dest)!r}, but {key} in "
                f"{loaded.path} sets {getattr(wanted, dest)!r}: remove one (the YAML is meant to say it)"
            )
    return LaunchCommand(argv, args)


def _owned(section: SglangSection | None, parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(SGLang dest, YAML key) of every value the YAML sets."""
    owned = [
        ("enable_hierarchical_cache", "the launch command (always on)"),
        ("hicache_storage_backend", "the launch command (dynamic)"),
        ("hicache_storage_backend_extra_config", "the launch command (this YAML)"),
    ]
    for name in SglangSection.model_fields:
        if section is not None and getattr(section, name) is not None:
            action = next((a for a in parser._actions if flag_of(name) in a.option_strings), None)
            if action is None:
                raise LaunchError(
                    f"sglang.{name}: SGLang's parser has no {flag_of(name)} (renamed in this SGLang?)"
                )
            owned.append((action.dest, f"sglang.{name}"))
    return owned
