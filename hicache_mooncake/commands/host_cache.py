"""``hicache-mooncake host-cache --config FILE``: run the host cache service in the foreground.

Backends start it by themselves (``tiers.host_cache``, ``host_cache.autostart``); run it by hand or
under systemd (``configs/hicache-mooncake-host-cache.service``) to keep it permanent. The same YAML
as SGLang's: ``host_cache:`` names the service, ``tiers.*`` are its tiers. Exits 0 at once when the
named service already runs; 2 on a bad configuration.

``--stats`` prints the running service's figures (its store, tiers and per-client accounting) as
JSON and exits (1 when it does not answer).
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


def run(args: argparse.Namespace) -> int:
    try:
        config = validate_config(read_yaml_file(args.config), source=args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.stats:
        return _stats(config)
    from hicache_mooncake.host_cache import service

    try:
        return service.run(config, args.lock_fd, args.config)
    except (OSError, ValueError) as exc:
        print(f"{args.config}: cannot run the host cache: {exc}", file=sys.stderr)
        return 2


def register(sub: Any) -> None:
    parser = sub.add_parser("host-cache", help="run the host cache service (one per host) until stopped")
    parser.add_argument("--config", required=True, help="the YAML (host_cache: and tiers: sections)")
    parser.add_argument("--stats", action="store_true", help="print the running service's stats and exit")
    parser.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)
