"""``hicache-mooncake launch CONFIG [--dry-run] -- SGLANG_ARGS...``: start SGLang with HiCache and this
backend, from one YAML.

Builds ``python -m sglang.launch_server --enable-hierarchical-cache --hicache-storage-backend dynamic
--hicache-storage-backend-extra-config @/abs/CONFIG <flags of the sglang: section> SGLANG_ARGS``,
holds it against SGLang's own argument parser, and checks the combination first: the host-pool
layout against our zero-copy path, the host pool against SGLang's GPU pool and its own memory rule,
and the DRAM tiers of every rank on this host (TP x PP x DP / nodes, from SGLANG_ARGS) beside
SGLang's host pools against the host's memory, SGLang's own parsing of the file, and this host
(SSD directories and space, shared memory, ports), as ``config validate`` does; a
``$HICACHE_MOONCAKE_CONFIG`` naming another file is refused. Each problem names the key to change. With errors
nothing is started (exit 2); warnings are printed and SGLang starts. ``--dry-run`` prints the
command line instead of running it (it replaces this process, so SGLang's exit status is ours).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from hicache_mooncake.checks.environment import environment_findings
from hicache_mooncake.checks.findings import Finding, errors
from hicache_mooncake.checks.launch import check
from hicache_mooncake.checks.validation import env_override
from hicache_mooncake.commands import UsageError
from hicache_mooncake.config import CONFIG_ENV, load_config_file
from hicache_mooncake.config.sglang_parse import sglang_refusals
from hicache_mooncake.launch_command import LaunchCommand, LaunchError, build


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "launch",
        help="start SGLang (python -m sglang.launch_server) with this backend and the YAML's sglang: flags",
        description=__doc__,
    )
    parser.add_argument(
        "config", metavar="CONFIG", help="the YAML (a preset path, or your copy; @ prefix allowed)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print SGLang's command line, do not run it")
    parser.add_argument(
        "sglang_args", nargs=argparse.REMAINDER, metavar="-- SGLANG_ARGS", help="SGLang's other arguments"
    )
    parser.set_defaults(func=run)


def prepare(config: str, rest: list[str]) -> tuple[LaunchCommand, list[Finding]]:
    """The command and the findings of its checks (``launch`` and tests): those of ``config
    validate`` (SGLang's own parsing of the file, our loader, the sglang: section, this host) for
    the ranks SGLANG_ARGS start here; ``$HICACHE_MOONCAKE_CONFIG`` naming another file is an error
    (the backend would run a file that was not checked, nor the one on the command line)."""
    loaded = load_config_file(config)
    try:
        command = build(loaded, rest)
    except LaunchError as exc:
        raise UsageError(str(exc)) from None
    ranks = command.ranks_per_host()
    parsed = sglang_refusals(loaded.path)  # its note (whose parser ran) only beside its errors
    findings = [*(parsed if errors(parsed) else []), *check(loaded.config, ranks)]
    findings += environment_findings(loaded.config, ranks)
    other = env_override(loaded.path, os.environ)
    if other is not None:
        findings.append(
            Finding(
                "error",
                f"${CONFIG_ENV}={other} is set: the backend in SGLang would read that file instead of "
                f"{loaded.path}; unset it (or set it to {loaded.path.resolve()}) so one checked YAML runs",
            )
        )
    return command, findings


def run(args: argparse.Namespace) -> int:
    rest = list(args.sglang_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    command, findings = prepare(args.config, rest)
    for finding in findings:
        print(f"hicache-mooncake launch: {finding}", file=sys.stderr)
    errors = [f for f in findings if f.level == "error"]
    if args.dry_run:
        print(shlex.join(command.argv))
    if errors:
        raise UsageError(f"{len(errors)} problem(s) above; SGLang was not started")
    if args.dry_run:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command.argv[0], command.argv)
    return 0  # not reached
