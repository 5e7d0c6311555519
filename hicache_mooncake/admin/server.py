"""``AdminServer``: the admin endpoint of one backend rank (HTTP + JSON, ``routes.py``).

It listens on ``admin.host`` (loopback by default) at ``admin.port + rank index`` (0: any free
port), on a daemon thread; every request needs the bearer token when one is configured, and one
is required off loopback (``auth.py``). The URL is logged (never the token) and written to the
host's discovery directory so ``hicache-mooncake admin`` reaches every rank. Requests never run
store work on the listener's threads for long: operations that take time run on their own thread
(``operations.py``). ``close`` stops it within a second and removes the discovery file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.metrics_discovery import APP_DIR, Endpoint, register, unregister
from hicache_mooncake.tiers.runtime_ops import OperationError

from . import auth, hint_routes  # noqa: F401 - registers the hint routes
from .operations import Busy
from .routes import AdminContext, BadRequest, find

log = logging.getLogger(__name__)
MAX_BODY = 8 << 20  # a hint request of 65536 SGLang page hashes is 4.3 MiB


def rank_index(tp_rank: int, tp_size: int, pp_rank: int = 0, pp_size: int = 1, dp_rank: int = 0) -> int:
    """The rank's index among the scheduler processes of one server (the metrics' port rule)."""
    return tp_rank + tp_size * (pp_rank + pp_size * dp_rank)


def discovery_dir(config: AdminConfig) -> Path:
    """``admin.discovery_dir``, else ``$XDG_RUNTIME_DIR/hicache-mooncake/admin`` (or
    ``/tmp/hicache-mooncake-<uid>/admin``)."""
    if config.discovery_dir:
        return Path(os.path.expanduser(config.discovery_dir))
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = (
        Path(runtime) / APP_DIR
        if runtime and os.path.isdir(runtime)
        else Path(f"/tmp/{APP_DIR}-{os.geteuid()}")
    )
    return base / "admin"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Requests are not logged (headers carry the token); operations log themselves."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def _serve(self, method: str) -> None:
        admin = self.server.admin
        if not auth.authorized(self.headers.get("Authorization"), admin.token):
            self._reply(401, {"error": "missing or wrong bearer token"})
            return
        path = self.path.split("?", 1)[0]
        handler, param = find(method, path)
        if handler is None:
            self._reply(404, {"error": f"no route {method} {path}"})
            return
        try:
            body = self._body()
            if param:
                body["id"] = param
            status, out = handler(admin.context, body)
        except (BadRequest, OperationError, ConfigError, ValueError) as exc:
            status, out = 400, {"error": str(exc)}
        except Busy as exc:
            status, out = 409, {"error": str(exc)}
        except Exception as exc:  # a bug: answer, log, keep serving
            log.exception("admin %s %s failed", method, path)
            status, out = 500, {"error": f"internal error: {type(exc).__name__}"}
        self._reply(status, out)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise BadRequest(f"request body over {MAX_BODY} bytes")
        if not length:
            return {}
        try:
            data = json.loads(self.rfile.read(length))
        except ValueError:
            raise BadRequest("the body is not JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("the body must be a JSON object")
        return data

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], admin: AdminServer) -> None:
        self.admin = admin
        super().__init__(address, _Handler)


class AdminServer:
    """The endpoint of one rank (module docstring). ``start`` raises ConfigError (no token off
    loopback, unreadable token file) or OSError (port taken)."""

    def __init__(self, config: AdminConfig, context: AdminContext, index: int = 0) -> None:
        self.config = config
        self.context = context
        self.index = index
        self.token: str | None = None
        self.port: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._discovery: Path | None = None

    @property
    def url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> int:
        assert self.config.port is not None
        self.token = auth.load_token(self.config)
        auth.require_token_for(self.config, self.token)
        port = self.config.port + self.index if self.config.port else 0
        self._server = _Server((self.config.host, port), self)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="hicache-admin",
            daemon=True,
        )
        self._thread.start()
        labels = {k: str(v) for k, v in self.context.labels.items()}
        try:
            self._discovery = register(
                discovery_dir(self.config), Endpoint("admin", self.url, os.getpid(), labels), self.port
            )
        except OSError as exc:
            log.warning("admin endpoint: cannot write its discovery file: %s (the CLI needs --url)", exc)
        log.info(
            "hicache-mooncake admin endpoint on %s (rank index %d, token %s)",
            self.url, self.index, "required" if self.token else "not configured",
        )  # fmt: skip
        return self.port

    def close(self) -> None:
        server, self._server = self._server, None
        unregister(self._discovery)
        self._discovery = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
