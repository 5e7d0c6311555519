"""``POST /v1/lookup``: which of a request's pages this rank holds, and where, in one call (a KV-aware
router asks it per request).

Request: ``{"keys": [page hash, ...], "tenant"?: name, "remote"?: bool}``. ``keys`` are SGLang's
page hashes as SGLang passes them to ``batch_exists`` (hex strings, in prefix order); the backend
maps them to its object keys (``AdminContext.store_keys``: namespace, tenant digest, rank or head
group suffix, chunks), so the answer is about this rank's own shard of each page.

Answer: ``{"tiers": [tier | null, ...], "longest_prefix": n, "counts": {tier: pages}, "asked":
[tier names]}``: per key the fastest tier holding the whole page (``"dram"``, ``"ssd"``, or a pool:
``"remote"``, ``"host_cache"``); a page stored as several objects (head groups, chunks) is held
when all are, in the slowest tier holding one of them. ``longest_prefix`` is the leading run of
held pages (what a ``batch_exists`` would count now).

Invariants and failure semantics:
- read-only: index lookups in one batch per tier (``TieredStore.where_batch``), no store lock, no
  policy call, no hit or miss counted: a lookup never changes what is evicted;
- no I/O unless asked: the local tiers only (``asked`` names them), except with ``"remote": true``:
  then each pool tier is asked once per call, bounded by its deadline, through its existence call
  (the remote pool; the host cache service, which is a rank's only tier in host-cache mode: its
  policy sees that call as an existence check, as SGLang's ``batch_exists``);
- block hashes (SGLang's KV-event ints) are refused (400): the event id is a lossy 64-bit prefix
  of the page hash (``kv_events.block_ids``) and this rank keeps no id -> key index; send the page
  hashes;
- a local lookup of at most ``INLINE_MAX_BODY`` bytes is answered on the server's selector thread
  (``routes.INLINE``: one thread hand-off less); others go to a worker like every route;
- at most ``MAX_LOOKUP_KEYS`` keys per call; a key that is not a page key is 400 naming it;
  before SGLang registered its host pool the key space is unknown: 409.
"""

from __future__ import annotations

from typing import Any

from hicache_mooncake.keys import MAX_PAGE_KEY_CHARS

from .hint_routes import tenant
from .routes import INLINE, AdminContext, BadRequest, route

MAX_LOOKUP_KEYS = 65536
INLINE_MAX_BODY = 64 << 10
"""A local lookup this small (about 900 page hashes) is answered on the server's selector thread."""
_RANK = {"dram": 0, "ssd": 1}  # a pool ranks after both (slower: a network or socket hop)


def lookup_keys(body: dict[str, Any]) -> list[str]:
    """``body["keys"]``: 1..MAX_LOOKUP_KEYS page hashes (non-empty strings)."""
    value = body.get("keys")
    if not isinstance(value, list):
        raise BadRequest("'keys' is required: a list of SGLang page hashes (strings, prefix order)")
    if not value:
        raise BadRequest("'keys' is empty: name at least one page hash")
    if len(value) > MAX_LOOKUP_KEYS:
        raise BadRequest(f"'keys' has {len(value)} entries, at most {MAX_LOOKUP_KEYS} per request")
    if (
        set(map(type, value)) == {str}
        and min(map(len, value)) > 0
        and max(map(len, value)) <= MAX_PAGE_KEY_CHARS
    ):
        return value  # the usual request: C-level passes only
    for i, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool):
            raise BadRequest(
                f"'keys'[{i}] is an integer: block hashes (KV-event ids) are not accepted, they are a "
                "lossy prefix of the page hash; send SGLang's page hashes (hex strings)"
            )
        if not isinstance(item, str) or not 0 < len(item) <= MAX_PAGE_KEY_CHARS:
            raise BadRequest(
                f"'keys'[{i}] must be a non-empty string of at most {MAX_PAGE_KEY_CHARS} characters"
            )
    return value


def page_tiers(where: list[str | None], per_page: int) -> list[str | None]:
    """Per page, the slowest tier among its ``per_page`` objects' (None when one is missing)."""
    if per_page == 1:
        return where
    out: list[str | None] = []
    for first in range(0, len(where), per_page):
        names = where[first : first + per_page]
        out.append(None if None in names else max(names, key=lambda n: _RANK.get(n or "", 2)))
    return out


def answer_inline(ctx: AdminContext, raw: bytes) -> bool:
    """A small lookup that asks the local tiers only: bounded and without I/O."""
    return len(raw) <= INLINE_MAX_BODY and ctx.store.local and b'"remote"' not in raw


INLINE[("POST", "/v1/lookup")] = answer_inline


@route("POST", "/v1/lookup")
def lookup(ctx: AdminContext, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    hashes = lookup_keys(body)
    owner = tenant(body)
    remote = body.get("remote", False)
    if not isinstance(remote, bool):
        raise BadRequest("'remote' must be true or false")
    mapping = ctx.store_keys
    if mapping is None:
        return 409, {
            "error": "this endpoint has no key space: lookups name SGLang page hashes (no SGLang backend)"
        }
    try:
        keys = mapping(hashes, owner)
    except ValueError as exc:  # before SGLang registered its host pool
        return 409, {"error": f"{exc}; retry once SGLang has started"}
    per_page = max(1, len(keys) // len(hashes))
    tiers = page_tiers(ctx.store.where_batch(keys, pools=remote), per_page)
    held = tiers.index(None) if None in tiers else len(tiers)
    counts: dict[str, int] = {}
    for name in tiers:
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    lay = ctx.store.tiers
    asked = [t.name for t in lay if remote or t is ctx.store.dram or t is ctx.store.ssd]
    return 200, {**ctx.labels, "tiers": tiers, "longest_prefix": held, "counts": counts, "asked": asked}
