"""The host cache service: ``hicache-mooncake host-cache --config FILE``.

One process per host and name. It takes the service lock (or adopts the one its starter handed
over) and exits at once when another service holds it. Then it builds the same ``TieredStore`` a
backend builds in-process, from the YAML's ``tiers.dram`` (the arena: a shared-memory file, proven
and locked like a memory node's, stale arenas of dead services removed first), ``tiers.ssd`` (one
engine over the configured devices, directory ``<path>/host-cache`` shared by every rank; its
index is recovered from the disk at start) and ``tiers.remote``, placed by ``tiers.policy``. It
serves that store on ``<dir>/<name>.sock`` (a memory node on a Unix socket: file mode 0600 and the
kernel's peer credentials, no secret).

It runs until SIGTERM/SIGINT, or until no client has been connected for
``host_cache.idle_timeout_s``; then it stops accepting, lets requests finish, copies the DRAM pages
the SSD lacks to the SSD (``tiers.ssd.flush_on_detach_s``), removes its socket and arena and exits.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import threading
import time
from typing import Any

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.kv_events.attach import start_service_publisher
from hicache_mooncake.store_builder import build_service_store
from hicache_mooncake.transport.node.config import NodeConfig
from hicache_mooncake.transport.node.server import NodeServer

from . import lock
from .admin_endpoint import start_service_admin
from .launcher import write_snapshot
from .paths import HostCachePaths

log = logging.getLogger("hicache_mooncake.host_cache")


def node_config(config: BackendConfig, paths: HostCachePaths) -> NodeConfig:
    hc = config.host_cache
    return NodeConfig(
        node_id=paths.node_id,
        unix_socket=paths.socket,
        secret_env="",  # a Unix socket: file mode and peer credentials, never a secret from the env
        shm=True,
        shm_dir=hc.shm_dir,
        max_connections=hc.max_clients,
        max_handshakes_per_peer=max(32, 2 * hc.connections),
        request_timeout_s=config.io.timeout_s,
        idle_timeout_s=max(60.0, 10 * hc.retry_interval_s),
    )


class HostCacheService:
    def __init__(self, config: BackendConfig, lock_fd: int, config_file: str | None = None) -> None:
        self.config = config
        self.paths = HostCachePaths.of(config.host_cache)
        self._lock_fd = lock_fd
        self.config_file = config_file or ""
        self.fatal = ""  # why it cannot serve any more (health.ServiceWatch): exit non-zero
        lock.write_pid(lock_fd)
        if config_file is None or os.path.realpath(config_file) != os.path.realpath(self.paths.config):
            # started from another file (an operator's): clients read the service's configuration here
            write_snapshot(self.paths, config, config_file or "")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.paths.socket)  # we hold the lock: a socket file left there is a dead one's
        self.server = NodeServer(
            node_config(config, self.paths), functools.partial(build_service_store, config)
        )
        self.events = start_service_publisher(config.events, self.server.store)  # KV events (issue 47)
        self.stop = threading.Event()

    def run(self) -> int:
        self.server.start()
        from hicache_mooncake.config.metrics import ExporterConfig
        from hicache_mooncake.metrics.node import serve_node_metrics

        from .health import watch_service
        from .metrics import ClientCollector
        from .status import metrics_url, remove_status, write_status

        metrics = self.config.metrics  # the service registers where the ranks do: `stats` shows both
        exporter = serve_node_metrics(
            self.server,
            ExporterConfig(
                port=self.config.host_cache.metrics_port,
                host=metrics.host,
                discovery_dir=metrics.discovery_dir,
            ),
            "host-cache",
            ClientCollector(self.server.stats),
        )
        url = metrics_url(metrics.host, exporter.port) if exporter is not None else ""
        write_status(self.paths, self.config_file, url)
        watch = watch_service(
            self.server, self.paths.socket, self.paths.lock, self._lock_fd, self._cannot_serve
        )
        watch.start()
        admin = start_service_admin(self.config, self.server.store)  # issue 44: operators reach the tiers
        idle_limit = self.config.host_cache.idle_timeout_s
        last_client = time.monotonic()
        log.info("host cache %s serving on %s (pid %d)", self.paths.name, self.paths.socket, os.getpid())
        while not self.stop.wait(0.2):
            if self.server.connections:
                last_client = time.monotonic()
            elif idle_limit and time.monotonic() - last_client >= idle_limit:
                log.info("no client for %.0f s: stopping", idle_limit)
                break
        watch.close()
        if admin is not None:
            admin.close()
        self.server.drain()  # stops accepting first
        if self.events is not None:
            self.events.close()
        if exporter is not None:
            exporter.close()
        remove_status(self.paths)
        os.close(self._lock_fd)
        return 1 if self.fatal else 0

    def _cannot_serve(self, reason: str) -> None:
        self.fatal = reason
        self.stop.set()


def run(config: BackendConfig, lock_fd: int | None = None, config_file: str | None = None) -> int:
    """Serve until stopped; 0 also when another service already holds the lock. ``config_file``:
    the file ``config`` was read from (the service's configuration file is written from it when
    it is not that file: ``authority``)."""
    paths = HostCachePaths.of(config.host_cache)
    paths.ensure_dir()
    if lock_fd is not None and not lock.adopt(lock_fd):
        lock_fd = None
    fd = lock_fd if lock_fd is not None else lock.try_lock(paths.lock)
    if fd is None:
        log.info("host cache %s already runs (pid %s)", paths.name, lock.holder_pid(paths.lock))
        return 0
    service = HostCacheService(config, fd, config_file)

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        service.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return service.run()
