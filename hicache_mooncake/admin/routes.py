"""The admin endpoint's routes: each is one small handler over a store method.

A handler takes the ``AdminContext`` (the store, the tier factory, the running operations) and the
request's JSON body, and returns ``(status, json)``. Long operations start an ``Operation`` and
answer 202 with it; the client polls ``GET /v1/operations/<id>``. Errors are 400 (bad request: the
message says what), 404 (unknown route or operation), 409 (another operation runs; a hint
before SGLang registered its host pool).

Adding a route is one decorated function here (``@route(method, path)``). The policy hints (pin,
shared, sessions) are routes of this kind in ``hint_routes.py``: ``AdminContext.store_keys`` maps
the SGLang page hashes a request names to the store's keys for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hicache_mooncake.config.tenants import check_tenant_name
from hicache_mooncake.sizes import parse_size
from hicache_mooncake.tiers.progress import Progress
from hicache_mooncake.tiers.runtime_ops import MODES
from hicache_mooncake.tiers.tiered_store import TieredStore

from .operations import Operations
from .tier_factory import TierFactory

Handler = Callable[["AdminContext", dict[str, Any]], tuple[int, dict[str, Any]]]
ROUTES: dict[tuple[str, str], Handler] = {}
INLINE: dict[tuple[str, str], Callable[[AdminContext, bytes], bool]] = {}
"""Routes whose handler may run on the server's selector thread, when their predicate says so for
a request's raw body: bounded and free of I/O (``http_loop``: one thread hand-off less)."""


class BadRequest(ValueError):
    """A request the endpoint refuses (400) with this message."""


@dataclass
class AdminContext:
    store: TieredStore
    factory: TierFactory | None = None
    operations: Operations = field(default_factory=Operations)
    labels: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 300.0
    store_keys: Callable[[list[str], str | None], list[str]] | None = None
    """SGLang page hashes (and a tenant; None: the backend's) -> the store's keys for them. None on
    an endpoint without an SGLang backend; the backend's raises ValueError until SGLang registered
    its host pool (the key space is not known before)."""
    layout: Callable[[], dict[str, Any]] | None = None
    """What the backend stores and how its keys are made (``layout.backend_layout``); None on an
    endpoint without an SGLang backend."""


def route(method: str, path: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES[(method, path)] = handler
        return handler

    return register


def find(method: str, path: str) -> tuple[Handler | None, str]:
    """The handler of ``method path`` and the path's trailing parameter (``/v1/operations/<id>``)."""
    handler = ROUTES.get((method, path))
    if handler is not None:
        return handler, ""
    head, _, tail = path.rstrip("/").rpartition("/")
    return ROUTES.get((method, f"{head}/{{id}}")), tail


def _str(body: dict[str, Any], key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str):
        raise BadRequest(f"{key!r} must be a string" if key in body else f"{key!r} is required")
    return value


def _timeout(ctx: AdminContext, body: dict[str, Any]) -> float:
    value = body.get("timeout_s", ctx.timeout_s)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise BadRequest("'timeout_s' must be a positive number of seconds")
    return float(value)


def _started(
    ctx: AdminContext, kind: str, args: dict[str, Any], work: Callable[[Progress], None]
) -> tuple[int, dict[str, Any]]:
    if ctx.labels.get("host_cache_socket"):  # a host cache's client rank: its tiers are the service's
        raise BadRequest(
            f"this rank keeps its tiers in host cache {ctx.labels.get('host_cache')!r}: {kind} runs on the "
            "service's own admin endpoint ('hicache-mooncake admin' without --url sends it there)"
        )
    op = ctx.operations.start(kind, args, work)
    return 202, op.view()


# ---------------------------------------------------------------------- reading
@route("GET", "/v1/tiers")
def show(ctx: AdminContext, _body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Each tier (kind, capacity, use), the store's state, the tenants, the operation running."""
    stats = ctx.store.stats()
    lay = ctx.store.tiers
    tiers = []
    for tier in lay:
        figures = stats.get(tier.name, {})
        resizable = tier is ctx.store.dram or tier is ctx.store.ssd
        tiers.append(
            {
                "name": tier.name,
                "kind": type(tier).__name__,
                "entries": figures.get("entries", 0),
                "used_bytes": figures.get("used_bytes", 0),
                "capacity_bytes": figures.get("capacity_bytes", 0),
                "max_capacity_bytes": figures.get("max_capacity_bytes", figures.get("max_capacity", 0)),
                "resizable": resizable,
            }
        )
    running = [op.view() for op in ctx.operations.all() if op.state == "running"]
    return 200, {
        **ctx.labels,
        "tiers": tiers,
        "frozen": ctx.store.frozen,
        "tenants": stats.get("tenants", {}),
        "placement": stats.get("placement", {}),
        "warm": stats.get("warm", {}),
        "running": running,
    }


@route("GET", "/v1/operations")
def operations(ctx: AdminContext, _body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return 200, {**ctx.labels, "operations": [op.view() for op in ctx.operations.all()]}


@route("GET", "/v1/operations/{id}")
def operation(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    op = ctx.operations.get(body["id"])
    if op is None:
        return 404, {"error": f"no operation {body['id']!r}"}
    return 200, {**ctx.labels, **op.view()}


# ---------------------------------------------------------------------- changing
@route("POST", "/v1/resize")
def resize(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``{"tier": "dram"|"ssd", "capacity": "8GiB"}``: the tier's new size (up to max_capacity)."""
    name = _str(body, "tier")
    raw = body.get("capacity")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise BadRequest("'capacity' is required: bytes, or a size such as '8GiB'")
    try:
        capacity = parse_size(raw)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"'capacity': {exc}") from None
    timeout = _timeout(ctx, body)
    return _started(
        ctx, "resize", {"tier": name, "capacity": capacity},
        lambda p: ctx.store.resize_tier(name, capacity, timeout, p),
    )  # fmt: skip


@route("POST", "/v1/detach")
def detach(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``{"tier": name, "mode": "drain"|"drop"}``: take one tier out (drain moves its pages first)."""
    name = _str(body, "tier")
    mode = _str(body, "mode", "drain")
    if mode not in MODES:
        raise BadRequest(f"'mode' must be one of {', '.join(MODES)}, got {mode!r}")
    timeout = _timeout(ctx, body)
    return _started(
        ctx, "detach", {"tier": name, "mode": mode}, lambda p: ctx.store.detach_tier(name, mode, timeout, p)
    )


@route("POST", "/v1/attach")
def attach(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``{"tier": "ssd"|"remote"|"dram", "config": {"tiers": {"ssd": {...}}, ...}}``: add a tier the
    YAML did not have at start (the section is merged over the running configuration)."""
    name = _str(body, "tier")
    overrides = body.get("config", {})
    if not isinstance(overrides, dict):
        raise BadRequest("'config' must be a mapping (a part of the YAML document)")
    factory = ctx.factory
    if factory is None:
        raise BadRequest("this endpoint cannot build tiers (no configuration)")
    timeout = _timeout(ctx, body)

    def work(progress: Progress) -> None:
        progress.phase("build")
        tier = factory.build(name, overrides)
        try:
            ctx.store.attach_tier(tier, timeout, progress)
        except BaseException:
            tier.close()
            raise

    return _started(ctx, "attach", {"tier": name}, work)


@route("POST", "/v1/freeze")
def freeze(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``{"frozen": true|false}``: refuse new pages (reads go on), or accept them again."""
    frozen = body.get("frozen", True)
    if not isinstance(frozen, bool):
        raise BadRequest("'frozen' must be true or false")
    ctx.store.freeze(frozen)
    return 200, {**ctx.labels, "frozen": ctx.store.frozen}


@route("POST", "/v1/clear")
def clear_tenant(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``{"tenant": name}``: remove one tenant's pages from every tier (the others stay)."""
    tenant = check_tenant_name(_str(body, "tenant"))
    timeout = _timeout(ctx, body)
    return _started(ctx, "clear", {"tenant": tenant}, lambda p: ctx.store.clear_tenant(tenant, timeout, p))
