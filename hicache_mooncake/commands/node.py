"""``hicache-mooncake node --config FILE``: run a memory node in the foreground until SIGTERM.

Uses the ``node:`` and ``metadata:`` sections of the YAML (e.g. ``configs/cluster.yaml``); the
whole file is validated with the backend's loader, so the one file that serves both sides is
refused here exactly as the backend would refuse it (YAML path of each bad key and the reason),
and so is a node that would listen beyond loopback without a shared secret (exit 2). Sizes may be
written ``4GiB``; the path may carry SGLang's ``@`` prefix.

``hicache-mooncake node --gc [--config FILE]`` removes, in ``node.shm_dir``, the shared-memory
arenas that dead nodes left behind (a node does this for its own node id at every start) and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import resource
import signal
import threading
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.config import load_config_file
from hicache_mooncake.config.cluster import NodeSection
from hicache_mooncake.config.metrics import ExporterConfig
from hicache_mooncake.metrics_exporter import MetricsExporter
from hicache_mooncake.metrics_node import node_registry
from hicache_mooncake.transport.arena_files import collect_stale
from hicache_mooncake.transport.metadata import MetadataConfig, make_metadata
from hicache_mooncake.transport.node_server import NodeServer

log = logging.getLogger("hicache_mooncake.node")


class _PolicyEvictor:
    """Adapts a ``tiers.policy`` eviction policy to the node store's evictor contract."""

    def __init__(self, name: str) -> None:
        from hicache_mooncake.tiers.policy import make_policy

        self.policy = make_policy(name)

    def on_insert(self, key: str) -> None:
        self.policy.on_insert(key)

    def on_hit(self, key: str) -> None:
        self.policy.on_hit(key)

    def on_remove(self, key: str) -> None:
        self.policy.on_remove(key)

    def pop_victim(self) -> str | None:
        return self.policy.pop_victim()


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
    if args.port is not None:
        node_cfg = node_cfg.model_copy(update={"port": args.port})
    if args.ready_file:
        node_cfg = node_cfg.model_copy(update={"ready_file": args.ready_file})
    evictor = None if node_cfg.eviction == "lru" else _PolicyEvictor(node_cfg.eviction)
    _raise_fd_limit()
    metadata = make_metadata(meta_cfg)
    try:
        server = NodeServer(
            node_cfg,
            metadata if meta_cfg.backend == "redis" else None,
            evictor,
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
    exporter = _serve_metrics(server, node_cfg.metrics, args.metrics_port)
    while not stop.wait(0.5):
        pass
    server.drain()
    if exporter is not None:
        exporter.close()
    metadata.close()
    return 0


def _health(server: NodeServer) -> tuple[bool, dict[str, Any]]:
    stats = server.stats()
    draining = bool(stats.get("draining"))
    return not draining, {
        "node": server.node_id,
        "draining": draining,
        "connections": stats.get("connections"),
    }


def _serve_metrics(server: NodeServer, cfg: ExporterConfig, port: int | None) -> MetricsExporter | None:
    """The node's ``/metrics`` and ``/healthz`` (``node.metrics``; ``--metrics-port`` wins). A port
    that cannot be bound is logged and the node serves without it (its pool matters more)."""
    port = cfg.port if port is None else port
    if port is None:
        return None
    exporter = MetricsExporter(
        node_registry(server.stats, server.node_id),
        lambda: _health(server),
        "node",
        {"node": server.node_id},
    )
    try:
        bound = exporter.start(cfg.host, port, cfg.discovery_dir)
    except OSError as exc:
        log.error("node.metrics.port %d on %s: %s; serving without metrics", port, cfg.host, exc)
        return None
    log.info("node %s metrics: http://%s:%d/metrics (and /healthz)", server.node_id, cfg.host, bound)
    return exporter


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
