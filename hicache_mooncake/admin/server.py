"""``AdminServer``: the admin endpoint of one backend rank (HTTP + JSON, ``routes.py``).

It listens on ``admin.host`` (loopback by default) at ``admin.port + rank index`` (0: any free
port). Every request needs the bearer token, on loopback too: the operator's
(``admin.token_file`` or ``$admin.token_env``), else one the first rank of the user generates in
``<discovery dir>/admin.token`` (0600, in a 0700 directory; ``auth.py``), which the CLI reads from
the same place. Off loopback only an operator's token is accepted. The URL is logged (never the
token) and written to the host's discovery directory so ``hicache-mooncake admin`` reaches every
rank.

The server is bounded (``http_loop.py``): one selector thread reads every request's head and body
with deadlines, the token is checked before any byte of the body is read, malformed requests are
answered 4xx, and only complete authorised requests reach its few worker threads. Operations that
take time run on their own thread (``operations.py``). ``close`` stops it within about a second
and removes the discovery file.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.metrics.discovery import Endpoint, register, unregister
from hicache_mooncake.runtime_dir import runtime_dir
from hicache_mooncake.tiers.runtime_ops import OperationError

from . import auth, hint_routes, layout_routes, lookup_routes  # noqa: F401 - register their routes
from .http_loop import BoundedHTTPServer, Limits, Reply, Request
from .operations import Busy
from .routes import INLINE, AdminContext, BadRequest, find

log = logging.getLogger(__name__)
MAX_BODY = Limits().max_body_bytes


def rank_index(tp_rank: int, tp_size: int, pp_rank: int = 0, pp_size: int = 1, dp_rank: int = 0) -> int:
    """The rank's index among the scheduler processes of one server (the metrics' port rule)."""
    return tp_rank + tp_size * (pp_rank + pp_size * dp_rank)


def discovery_dir(config: AdminConfig) -> Path:
    """``admin.discovery_dir``, else ``$XDG_RUNTIME_DIR/hicache-mooncake/admin`` (or
    ``/tmp/hicache-mooncake-<uid>/admin``)."""
    if config.discovery_dir:
        return Path(os.path.expanduser(config.discovery_dir))
    return runtime_dir() / "admin"


def start_failure_fatal(config: AdminConfig, exc: BaseException) -> bool:
    """Whether an endpoint that cannot start must fail the backend's attach. Fatal: what the
    operator set explicitly and fixes in the YAML: a fixed ``admin.port`` that cannot be bound, an
    operator token that cannot be read, a host off loopback without a token (``ConfigError``).
    Not fatal: the generated token's private directory or file is unsafe (``TokenPlaceError``:
    another local user can plant ``/tmp/hicache-mooncake-<uid>``, and must not stop SGLang from
    starting), or no port is free with ``admin.port: 0`` (the presets' default). The backend then
    runs without its endpoint and logs one ERROR naming the problem and the fix."""
    if isinstance(exc, auth.TokenPlaceError):
        return False
    if isinstance(exc, ConfigError):
        return True
    return bool(config.port)


def unavailable_message(config: AdminConfig, exc: BaseException) -> str:
    """The ERROR a backend logs when it runs without its endpoint (``start_failure_fatal``)."""
    where = discovery_dir(config)
    return (
        f"hicache-mooncake admin endpoint NOT started ({exc}); the cache works, but 'hicache-mooncake "
        f"admin', lookups and hints cannot reach this rank. Fix: remove or repair {where.parent} (it "
        "must be a 0700 directory of this user), or set admin.discovery_dir to a private directory, "
        "or admin.token_file to an operator token; then re-attach the backend"
    )


def _handle(admin: AdminServer, request: Request) -> Reply:
    """One authorised request with its whole body: the route's answer, or the error's status."""
    path = request.path.split("?", 1)[0]
    handler, param = find(request.method, path)
    if handler is None:
        return 404, {"error": f"no route {request.method} {path}"}
    try:
        body = _json_body(request.body)
        if param:
            body["id"] = param
        return handler(admin.context, body)
    except (BadRequest, OperationError, ConfigError, ValueError) as exc:
        return 400, {"error": str(exc)}
    except Busy as exc:
        return 409, {"error": str(exc)}


def _inline(admin: AdminServer, request: Request) -> bool:
    """Whether the selector thread may answer ``request`` itself (``routes.INLINE``)."""
    ok = INLINE.get((request.method, request.path.split("?", 1)[0]))
    return ok is not None and ok(admin.context, request.body)


def _json_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise BadRequest("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


class AdminServer:
    """The endpoint of one rank (module docstring). ``start`` raises ConfigError (no operator token
    off loopback, unreadable token file, a generated token file or directory others could touch)
    or OSError (port taken)."""

    def __init__(
        self,
        config: AdminConfig,
        context: AdminContext,
        index: int = 0,
        limits: Limits | None = None,
        inline: bool = True,
    ) -> None:
        """``inline``: answer the routes of ``routes.INLINE`` on the selector thread (False: every
        request goes to a worker, as the benchmark's baseline)."""
        self.inline = inline
        self.config = config
        self.context = context
        self.index = index
        self.limits = limits or Limits()
        self.token: str | None = None
        self.port: int | None = None
        self._server: BoundedHTTPServer | None = None
        self._discovery: Path | None = None

    @property
    def url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.port}"

    def open_connections(self) -> int:
        """Connections the server holds now (0 when stopped)."""
        return self._server.open_connections() if self._server is not None else 0

    def start(self) -> int:
        assert self.config.port is not None
        configured = auth.load_token(self.config)
        auth.require_token_for(self.config, configured)
        self.token = configured or auth.generated_token(discovery_dir(self.config))
        token = self.token
        port = self.config.port + self.index if self.config.port else 0
        self._server = BoundedHTTPServer(
            (self.config.host, port),
            lambda request: auth.authorized(request.headers.get("authorization"), token),
            lambda request: _handle(self, request),
            self.limits,
            name="hicache-admin",
            inline=(lambda request: _inline(self, request)) if self.inline else None,
        )
        self.port = int(self._server.server_address[1])
        self._server.start()
        labels = {k: str(v) for k, v in self.context.labels.items()}
        try:
            self._discovery = register(
                discovery_dir(self.config), Endpoint("admin", self.url, os.getpid(), labels), self.port
            )
        except OSError as exc:
            log.warning("admin endpoint: cannot write its discovery file: %s (the CLI needs --url)", exc)
        log.info(
            "hicache-mooncake admin endpoint on %s (rank index %d, token required: %s)",
            self.url, self.index,
            "the configured one" if configured else auth.token_path(discovery_dir(self.config)),
        )  # fmt: skip
        return self.port

    def close(self) -> None:
        server, self._server = self._server, None
        unregister(self._discovery)
        self._discovery = None
        if server is not None:
            server.close()
