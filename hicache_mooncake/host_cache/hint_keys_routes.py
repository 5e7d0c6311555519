"""The host cache service's hint route: hints named by store keys, as the ranks forward them
(``hint_forward.ForwardingHints``), applied in order to the service's policy (``TieredStore.hints``).

``POST /v1/hints/keys`` ``{"hints": [{"action": A, "keys": [...], "ttl_s"?: s, "session"?: id},
...]}`` with ``A`` one of ``pin``, ``unpin``, ``shared`` (these two need ``ttl_s``), ``open``,
``attach``, ``close`` (these three need ``session``). Only the service's endpoint accepts it (a
rank's hints name page hashes: ``admin/hint_routes.py``). Every entry is checked before any is
applied: a 400 names the first bad field and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hicache_mooncake.admin.hint_routes import MAX_PAGE_HASHES, MAX_SESSION_CHARS, ttl
from hicache_mooncake.admin.routes import AdminContext, BadRequest, route
from hicache_mooncake.keys import MAX_PAGE_KEY_CHARS
from hicache_mooncake.tiers.policy.hints import Hints

ROLE = "host-cache"
"""The ``role`` label of the service's admin endpoint (a rank's has a ``rank`` label instead)."""
ACTIONS = ("pin", "unpin", "shared", "open", "attach", "close")
_WITH_TTL = ("pin", "shared")
_WITH_SESSION = ("open", "attach", "close")
MAX_ENTRIES = 4096
MAX_KEY_CHARS = MAX_PAGE_KEY_CHARS + 256  # a store key: namespace, tenant digest, page, rank suffix


def _entry(i: int, raw: Any) -> Callable[[Hints], None]:
    """Entry ``i`` checked, as the call that applies it."""
    if not isinstance(raw, dict):
        raise BadRequest(f"'hints'[{i}] must be an object")
    action = raw.get("action")
    if action not in ACTIONS:
        raise BadRequest(f"'hints'[{i}].action must be one of {', '.join(ACTIONS)}, got {action!r}")
    keys = raw.get("keys", [])
    if not isinstance(keys, list) or len(keys) > MAX_PAGE_HASHES:
        raise BadRequest(f"'hints'[{i}].keys must be a list of at most {MAX_PAGE_HASHES} store keys")
    if not all(isinstance(k, str) and 0 < len(k) <= MAX_KEY_CHARS for k in keys):
        raise BadRequest(f"'hints'[{i}].keys: every key must be a non-empty string")
    if action in _WITH_TTL:
        try:
            seconds = ttl(raw)
        except BadRequest as exc:
            raise BadRequest(f"'hints'[{i}]: {exc}") from None
        if action == "pin":
            return lambda h: h.pin(keys, seconds)
        return lambda h: h.mark_shared(keys, seconds)
    if action == "unpin":
        return lambda h: h.unpin(keys)
    sid = raw.get("session")
    if not isinstance(sid, str) or not 0 < len(sid) <= MAX_SESSION_CHARS:
        raise BadRequest(f"'hints'[{i}].session must be a non-empty string of at most {MAX_SESSION_CHARS}")
    if action == "open":
        return lambda h: h.open_session(sid, keys)
    if action == "attach":
        return lambda h: h.attach(sid, keys)
    return lambda h: h.close_session(sid, keys)


@route("POST", "/v1/hints/keys")
def keyed_hints(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if ctx.labels.get("role") != ROLE:
        return 404, {"error": "hints by store key are the host cache service's (name page hashes here)"}
    entries = body.get("hints")
    if not isinstance(entries, list) or not 0 < len(entries) <= MAX_ENTRIES:
        raise BadRequest(f"'hints' is required: a list of 1 to {MAX_ENTRIES} hint entries")
    calls = [_entry(i, raw) for i, raw in enumerate(entries)]
    for call in calls:
        call(ctx.store.hints)
    return 200, {**ctx.labels, "applied": len(calls), "hints": ctx.store.hints.stats()}
