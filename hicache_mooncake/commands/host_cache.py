"""``hicache-mooncake host-cache --config FILE``: run the host cache service in the foreground.

Backends start it by themselves (``tiers.host_cache``, ``host_cache.autostart``); run it by hand or
under systemd (``configs/hicache-mooncake-host-cache.service``) to keep it permanent. The same YAML
as SGLang's: ``host_cache:`` names the service, ``tiers.*`` are its tiers. Exits 0 at once when the
named service already runs; 2 on a bad configuration.

``--stats`` prints the running service's figures (its store, tiers and per-client accounting) as
JSON and exits (1 when it does not answer).

``host-cache status``: what runs (pid, socket, since when, the configuration file, tiers and
capacities, the clients attached, named by rank where they serve metrics); exit 0 when it runs, 3
when it does not (``--json``: the same as JSON). ``host-cache stop``: SIGTERM to the service, which
drains (in-flight requests finish, DRAM pages the SSD lacks are flushed) and exits; waits at most
``--timeout`` seconds; exit 0 when it stopped (or did not run), 1 when it still runs. Both read
``host_cache.dir`` and ``.name`` from ``--config`` (default: the per-user default service).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hicache_mooncake.config import ConfigError, read_yaml_file, validate_config


def _stats(config: Any) -> int:
    from hicache_mooncake.host_cache.client import client_options
    from hicache_mooncake.host_cache.paths import HostCachePaths
    from hicache_mooncake.transport.node_client import NodeClient

    paths = HostCachePaths.of(config.host_cache)
    client = NodeClient(f"unix:{paths.socket}", 0, client_options(config), "tcp")
    try:
        stats = client.stats()
    finally:
        client.close()
    if not stats["reachable"]:
        print(f"the host cache {paths.socket} does not answer", file=sys.stderr)
        return 1
    print(json.dumps(stats["node"], indent=2, sort_keys=True))
    return 0


def _status(config: Any, as_json: bool, timeout_s: float) -> int:
    from hicache_mooncake.host_cache.status import format_status, service_status

    st = service_status(config, timeout_s)
    print(json.dumps(st.as_dict(), indent=2) if as_json else format_status(st))
    return 0 if st.running else 3


def _stop(config: Any, timeout_s: float) -> int:
    from hicache_mooncake.host_cache.paths import HostCachePaths
    from hicache_mooncake.host_cache.status import stop_service

    stopped, message = stop_service(HostCachePaths.of(config.host_cache), timeout_s)
    print(message, file=sys.stdout if stopped else sys.stderr)
    return 0 if stopped else 1


def run(args: argparse.Namespace) -> int:
    if args.config is None and args.action == "run":
        print("hicache-mooncake host-cache: --config FILE is required to run the service", file=sys.stderr)
        return 2
    try:
        raw = read_yaml_file(args.config) if args.config is not None else {}
        config = validate_config(raw, source=args.config or "defaults")
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.action == "status":
        return _status(config, args.json, args.timeout if args.timeout is not None else 3.0)
    if args.action == "stop":
        return _stop(config, args.timeout if args.timeout is not None else 90.0)
    if args.stats:
        return _stats(config)
    from hicache_mooncake.host_cache import service

    try:
        return service.run(config, args.lock_fd, args.config)
    except (OSError, ValueError) as exc:
        print(f"{args.config}: cannot run the host cache: {exc}", file=sys.stderr)
        return 2


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "host-cache",
        help="run the host cache service (one per host) until stopped; or its status, or stop it",
    )
    parser.add_argument(
        "action",
        nargs="?",
        default="run",
        choices=("run", "status", "stop"),
        help="run (default): serve in the foreground; status: what runs; stop: drain and stop it",
    )
    parser.add_argument(
        "--config", default=None, help="the YAML (host_cache: and tiers: sections); required to run"
    )
    parser.add_argument("--json", action="store_true", help="status: print JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="status: seconds to wait for the service (3); stop: for it to exit (90)",
    )
    parser.add_argument("--stats", action="store_true", help="print the running service's stats and exit")
    parser.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)
