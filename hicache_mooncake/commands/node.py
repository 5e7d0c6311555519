"""``hicache-mooncake node --config FILE``: run a memory node in the foreground until SIGTERM.

The node serves the same store as a process's tiers (``store_builder.build_node_store``: the DRAM
tier, placed by the ``node.eviction`` policy). Uses the ``node:`` and ``metadata:`` sections of the
YAML (e.g. ``configs/cluster.yaml``); the whole file is validated with the backend's loader, so the
one file that serves both sides is refused here exactly as the backend would refuse it (YAML path
of each bad key and the reason), and so is a node that would listen beyond loopback without a
shared secret (exit 2). Sizes may be written ``4GiB``; the path may carry SGLang's ``@`` prefix.

``hicache-mooncake node --gc [--config FILE]`` removes, in ``node.shm_dir``, the shared-memory
arenas that dead nodes left behind (a node does this for its own node id at every start) and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import resource
import signal
import threading
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.config import load_config_file
from hicache_mooncake.config.cluster import NodeSection
from hicache_mooncake.metrics.node import serve_node_metrics
from hicache_mooncake.optional_deps import require
from hicache_mooncake.store_builder import build_node_store
from hicache_mooncake.transport.arena_files import collect_stale
from hicache_mooncake.transport.metadata import MetadataConfig, make_metadata
from hicache_mooncake.transport.node.server import NodeServer

log = logging.getLogger("hicache_mooncake.node")


def load(path: str) -> tuple[NodeSection, MetadataConfig]:
    """The node's sections of ``path``; ConfigError (exit status 2) on any problem with the file."""
    config = load_config_file(path).config
    return config.node or NodeSection(), config.metadata


def _raise_fd_limit() -> None:
    """Sockets are file descriptors: take the hard limit (a flood then costs descriptors the node
    has, and the handshake gate sheds the oldest ones when they run out)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def gc(shm_dir: str) -> int:
    removed = collect_stale(shm_dir)
    for stale in removed:
        print(f"removed {stale.path} (node {stale.node_id!r}, dead pid {stale.pid}, {stale.size} bytes)")
    print(f"{len(removed)} stale arena(s) removed from {shm_dir}, {sum(s.size for s in removed)} bytes freed")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.config is None and not args.gc:
        raise UsageError("--config FILE is required (or --gc)")
    node_cfg, meta_cfg = load(args.config) if args.config else (NodeSection(), MetadataConfig())
    if args.gc:
        return gc(node_cfg.shm_dir)
    if meta_cfg.backend == "redis":  # before anything starts: one line naming the extra, exit 2
        require("redis", needed_for="metadata.backend: redis")
    if args.port is not None:
        node_cfg = node_cfg.model_copy(update={"port": args.port})
    if args.ready_file:
        node_cfg = node_cfg.model_copy(update={"ready_file": args.ready_file})
    _raise_fd_limit()
    metadata = make_metadata(meta_cfg)
    try:
        server = NodeServer(
            node_cfg,
            functools.partial(build_node_store, node_cfg),
            metadata if meta_cfg.backend == "redis" else None,
            heartbeat_interval_s=meta_cfg.heartbeat_interval_s,
            heartbeat_ttl_s=meta_cfg.heartbeat_ttl_s,
        )
    except (OSError, ValueError) as exc:
        metadata.close()
        raise UsageError(f"{args.config}: cannot start the node: {exc}") from None
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: draining", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    metrics_cfg = node_cfg.metrics
    if args.metrics_port is not None:
        metrics_cfg = metrics_cfg.model_copy(update={"port": args.metrics_port})
    exporter = serve_node_metrics(server, metrics_cfg)
    while not stop.wait(0.5):
        pass
    server.drain()
    if exporter is not None:
        exporter.close()
    metadata.close()
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser("node", help="run a memory node (remote DRAM pool) until SIGTERM")
    parser.add_argument(
        "--config", default=None, help="YAML with node: and metadata: sections (@ prefix allowed)"
    )
    parser.add_argument(
        "--gc",
        action="store_true",
        help="remove arenas of dead nodes from node.shm_dir (default /dev/shm) and exit",
    )
    parser.add_argument("--port", type=int, default=None, help="override node.port")
    parser.add_argument("--ready-file", default=None, help="write 'host port' here once listening")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve /metrics and /healthz on this port (0: any free port; overrides node.metrics.port)",
    )
    parser.set_defaults(func=run)
