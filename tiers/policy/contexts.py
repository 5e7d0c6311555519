"""How each store call turns into per-key ``AccessContext``s: the one definition shared by the
real ``TieredStore`` and the replay simulator, so the policy sees the same inputs in both (and
``--mode store`` agrees with ``--mode sim``).

- set of ``keys`` after ``prefix_len`` pages of the request were already stored: ``position`` i,
  ``batch_len``, ``prefix_hits = prefix_len``, ``request_len = prefix_len + len(keys)``, ``prev_key``
  the key before it in the chain (``prev_key`` for the first one);
- get of a hit run: ``prefix_hits = len(keys)``, ``request_len`` the key count of the
  ``batch_exists`` that found the run (0 when unknown), ``prev_key`` chained within the call;
- the first missing key of an exists call: ``position = prefix_hits = found``,
  ``batch_len = request_len = len(keys)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hicache_mooncake.native import row_tuples
from hicache_mooncake.native.row_tuples import INDEX, PER_ITEM, SHARED

from .base import AccessContext, ObjectType


def _sizes(sizes: Sequence[int] | int, n: int) -> Sequence[int]:
    return [sizes] * n if isinstance(sizes, int) else sizes


#: how ``_contexts`` fills each field of AccessContext (``native.row_tuples``): the position is the
#: key's index, the size and the previous key are per key, the rest shared by the call
_KINDS = bytes((SHARED, INDEX, SHARED, SHARED, PER_ITEM, PER_ITEM, SHARED, SHARED, SHARED, SHARED))


def _contexts(
    n: int,
    now: float,
    prefix_hits: int,
    sizes: Sequence[int],
    prevs: Sequence[str | None],
    obj_type: ObjectType,
    request_len: int,
) -> list[AccessContext]:
    """Key ``i``'s context: position ``i`` of ``n``, ``sizes[i]``, ``prevs[i]``, the rest shared.
    Built in one native call (no Python code per key). Field order: now, position, batch_len,
    prefix_hits, size, prev_key, obj_type, demoted, promoted, request_len (checked by a test)."""
    if len(sizes) != n or len(prevs) != n:
        raise ValueError(f"{n} keys, {len(sizes)} sizes, {len(prevs)} previous keys")
    fields = (now, None, n, prefix_hits, sizes, prevs, obj_type, False, False, request_len)
    return row_tuples(AccessContext, n, fields, _KINDS)


def set_contexts(
    keys: Sequence[str],
    prefix_len: int,
    prev_key: str | None,
    sizes: Sequence[int] | int = 0,
    now: float = 0.0,
    obj_type: ObjectType = ObjectType.KV_PAGE,
) -> list[AccessContext]:
    n = len(keys)
    prevs = [prev_key, *keys[: n - 1]] if n else []
    request_len = prefix_len + n
    return _contexts(n, now, prefix_len, _sizes(sizes, n), prevs, obj_type, request_len)


def get_contexts(
    keys: Sequence[str],
    sizes: Sequence[int] | int = 0,
    request_len: int = 0,
    now: float = 0.0,
    obj_type: ObjectType = ObjectType.KV_PAGE,
) -> list[AccessContext]:
    n = len(keys)
    prevs = [None, *keys[: n - 1]] if n else []
    return _contexts(n, now, n, _sizes(sizes, n), prevs, obj_type, request_len)


def miss_context(found: int, batch_len: int, now: float = 0.0) -> AccessContext:
    return AccessContext(
        now=now, position=found, batch_len=batch_len, prefix_hits=found, request_len=batch_len
    )
