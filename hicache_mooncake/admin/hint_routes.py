"""The admin endpoint's hint routes: what an application or a router knows about the future, told to
the store's eviction policy (``TieredStore.hints``, ``tiers/policy/hints.py``).

Requests name pages by SGLang's page hashes (what SGLang passes to the backend); the backend maps
them to its store keys (``AdminContext.store_keys``: its namespace, the tenant's digest, its rank
suffix), so one request fanned out to every rank hints each rank's own shard of the pages.

- ``POST /v1/hints/pin`` ``{"page_hashes": [...], "ttl_s": 60, "tenant"?: name}``: the pages are
  not evicted until the TTL (or an unpin). ``POST /v1/hints/unpin`` ``{"page_hashes", "tenant"?}``.
- ``POST /v1/hints/shared`` ``{"page_hashes", "ttl_s", "tenant"?}``: the pages are shared (a system
  prompt) until the TTL.
- ``POST /v1/hints/session`` ``{"session": id, "action": "open"|"close", "page_hashes"?: [...],
  "tenant"?}``: the session's pages are likely read again while it is open, unlikely once closed.
- ``GET /v1/hints``: the hint channel's counts (``Hints.stats``).

Every field is checked (400 naming it); at most ``MAX_PAGE_HASHES`` hashes per request and a TTL
of at most ``MAX_TTL_S``. Before SGLang registered its host pool the key space is unknown: 409,
nothing changes. A request changes the hints of this rank only, all of it or (on a 400/409) none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hicache_mooncake.config.tenants import check_tenant_name
from hicache_mooncake.keys import MAX_PAGE_KEY_CHARS

from .routes import AdminContext, BadRequest, route

MAX_PAGE_HASHES = 65536
"""Hashes per request (more: 400; the CLI sends larger lists in several requests)."""
MAX_TTL_S = 7 * 24 * 3600.0
MAX_SESSION_CHARS = 256
SESSION_ACTIONS = ("open", "close")


def page_hashes(body: dict[str, Any], required: bool = True) -> list[str]:
    """``body["page_hashes"]``: a list of 1..MAX_PAGE_HASHES non-empty strings (an empty or absent
    list where not ``required``)."""
    if "page_hashes" not in body and not required:
        return []
    value = body.get("page_hashes")
    if not isinstance(value, list):
        raise BadRequest("'page_hashes' is required: a list of SGLang page hashes (strings)")
    if required and not value:
        raise BadRequest("'page_hashes' is empty: name at least one page hash")
    if len(value) > MAX_PAGE_HASHES:
        raise BadRequest(
            f"'page_hashes' has {len(value)} entries, at most {MAX_PAGE_HASHES} per request (send several)"
        )
    for i, item in enumerate(value):
        if not isinstance(item, str) or not 0 < len(item) <= MAX_PAGE_KEY_CHARS:
            raise BadRequest(
                f"'page_hashes'[{i}] must be a non-empty string of at most {MAX_PAGE_KEY_CHARS} characters"
            )
    return value


def ttl(body: dict[str, Any]) -> float:
    value = body.get("ttl_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(
            "'ttl_s' is required: a number of seconds" if value is None else "'ttl_s' must be a number"
        )
    if not math.isfinite(value) or not 0 < value <= MAX_TTL_S:
        raise BadRequest(f"'ttl_s' must be > 0 and at most {MAX_TTL_S:g} seconds, got {value!r}")
    return float(value)


def tenant(body: dict[str, Any]) -> str | None:
    """``body["tenant"]`` (None when absent: the backend's own tenant)."""
    if "tenant" not in body or body["tenant"] is None:
        return None
    value = body["tenant"]
    if not isinstance(value, str):
        raise BadRequest("'tenant' must be a string")
    try:
        return check_tenant_name(value)
    except ValueError as exc:
        raise BadRequest(f"'tenant': {exc}") from None


class NoKeySpace(Exception):
    """The store's keys of page hashes are not known yet (409)."""


def store_keys(ctx: AdminContext, body: dict[str, Any], required: bool = True) -> tuple[list[str], int]:
    """The store's keys of the request's page hashes (its fields checked first; a page stored in
    chunks has a key per chunk), and how many pages they are."""
    hashes = page_hashes(body, required)
    owner = tenant(body)
    if not hashes:
        return [], 0
    mapping = ctx.store_keys
    if mapping is None:
        raise NoKeySpace("this endpoint has no key space: hints name SGLang page hashes (no SGLang backend)")
    try:
        return mapping(hashes, owner), len(hashes)
    except ValueError as exc:  # the backend before SGLang registered its host pool
        raise NoKeySpace(f"{exc}; retry once SGLang has started") from None


def _answer(ctx: AdminContext, action: str, pages: int, **more: Any) -> tuple[int, dict[str, Any]]:
    return 200, {**ctx.labels, "action": action, "pages": pages, **more, "hints": ctx.store.hints.stats()}


def _refused(exc: NoKeySpace) -> tuple[int, dict[str, Any]]:
    return 409, {"error": str(exc)}


def _on_keys(
    ctx: AdminContext, body: dict[str, Any], op: str, apply: Callable[[list[str]], Any], **extra: Any
) -> tuple[int, dict[str, Any]]:
    """Apply a hint to the store keys of the body's pages and answer what it did (409 when the
    backend has no key space yet)."""
    try:
        keys, pages = store_keys(ctx, body)
    except NoKeySpace as exc:
        return _refused(exc)
    apply(keys)
    return _answer(ctx, op, pages, **extra)


@route("GET", "/v1/hints")
def show(ctx: AdminContext, _body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return 200, {**ctx.labels, "hints": ctx.store.hints.stats()}


@route("POST", "/v1/hints/pin")
def pin(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Hard protection: the pages stay until the TTL (``Hints.pin``; the oldest pins beyond its
    bound are released)."""
    seconds = ttl(body)
    return _on_keys(ctx, body, "pin", lambda keys: ctx.store.hints.pin(keys, seconds), ttl_s=seconds)


@route("POST", "/v1/hints/unpin")
def unpin(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return _on_keys(ctx, body, "unpin", ctx.store.hints.unpin)


@route("POST", "/v1/hints/shared")
def shared(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    seconds = ttl(body)
    return _on_keys(
        ctx, body, "shared", lambda keys: ctx.store.hints.mark_shared(keys, seconds), ttl_s=seconds
    )


@route("POST", "/v1/hints/session")
def session(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Open (pages likely reused) or close (pages unlikely reused) a session; ``page_hashes`` are
    pages it touched (optional: a session also owns the pages SGLang stored under its id)."""
    sid = body.get("session")
    if not isinstance(sid, str) or not 0 < len(sid) <= MAX_SESSION_CHARS:
        raise BadRequest(
            f"'session' is required: a non-empty string of at most {MAX_SESSION_CHARS} characters"
        )
    action = body.get("action")
    if action not in SESSION_ACTIONS:
        raise BadRequest(f"'action' must be one of {', '.join(SESSION_ACTIONS)}, got {action!r}")
    try:
        keys, pages = store_keys(ctx, body, required=False)
    except NoKeySpace as exc:
        return _refused(exc)
    hints = ctx.store.hints
    (hints.open_session if action == "open" else hints.close_session)(sid, keys)
    return _answer(ctx, f"session {action}", pages, session=sid)
