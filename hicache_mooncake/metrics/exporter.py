"""``MetricsExporter``: one process's HTTP endpoint: ``/metrics`` (Prometheus text of a registry) and
``/healthz`` (JSON; 200 when healthy, 503 when not), plus its discovery file.

Used by every long-running part that exports metrics (a backend rank, a memory node, a per-host
service): build a ``CollectorRegistry``, pass a health callback, ``start``; ``close`` stops the
server and removes the discovery file.

Failure semantics: ``start`` raises OSError when the port cannot be bound (the caller names its
config key); a discovery directory that cannot be written is logged once and skipped (the endpoint
still serves). The server threads are daemons; ``close`` is idempotent and never raises. A health
callback that raises answers 503 with the exception's text.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from hicache_mooncake.metrics import discovery as metrics_discovery
from hicache_mooncake.metrics.discovery import Endpoint

log = logging.getLogger(__name__)
Health = Callable[[], tuple[bool, dict[str, Any]]]
"""``() -> (healthy, details)``: details are the JSON body of ``/healthz``."""
_Environ = dict[str, Any]
_StartResponse = Callable[..., Any]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True  # a detach + attach rebinds the same port at once


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Scrapes every few seconds: not worth a log line each."""


class MetricsExporter:
    def __init__(
        self, registry: CollectorRegistry, health: Health, role: str, labels: dict[str, str] | None = None
    ) -> None:
        self.registry = registry
        self.health = health
        self.role = role
        self.labels = dict(labels or {})
        self.port: int | None = None
        self.discovery_file: Path | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._metrics_app = make_wsgi_app(registry)

    # ------------------------------------------------------------------ WSGI
    def _app(self, environ: _Environ, start_response: _StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/health"):
            try:
                ok, details = self.health()
            except Exception as exc:  # the endpoint answers whatever the callback does
                ok, details = False, {"error": f"{type(exc).__name__}: {exc}"}
            body = json.dumps({"status": "ok" if ok else "unhealthy", **details}).encode()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        if path in ("/metrics", "/"):
            result: Iterable[bytes] = self._metrics_app(environ, start_response)
            return result
        body = b"not found: /metrics and /healthz are served here\n"
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    # ------------------------------------------------------------------ lifecycle
    def start(self, host: str, port: int, discovery_dir: str = "") -> int:
        """Listen on ``host:port`` (0: any free port) and register for discovery; returns the port."""
        cls = _Server6 if ":" in host else _Server
        server = make_server(host, port, self._app, server_class=cls, handler_class=_QuietHandler)
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"hicache-{self.role}-metrics",
            daemon=True,
        )
        self._thread.start()
        where = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        url_host = f"[{where}]" if ":" in where else where
        directory = metrics_discovery.resolve_dir(discovery_dir)
        endpoint = Endpoint(self.role, f"http://{url_host}:{self.port}/metrics", os.getpid(), self.labels)
        try:
            self.discovery_file = metrics_discovery.register(directory, endpoint, self.port)
        except OSError as exc:
            log.warning(
                "metrics discovery: cannot register in %s (%s); `stats` will need --url", directory, exc
            )
        return self.port

    def close(self) -> None:
        server, self._server = self._server, None
        metrics_discovery.unregister(self.discovery_file)
        self.discovery_file = None
        if server is None:
            return
        try:
            server.shutdown()
            server.server_close()
        except OSError as exc:  # never raises (close paths call this)
            log.debug("metrics server close: %s", exc)
        if self._thread is not None:
            self._thread.join(2.0)
