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

from .base import AccessContext, ObjectType


def _sizes(sizes: Sequence[int] | int, n: int) -> Sequence[int]:
    return [sizes] * n if isinstance(sizes, int) else sizes


def set_contexts(
    keys: Sequence[str],
    prefix_len: int,
    prev_key: str | None,
    sizes: Sequence[int] | int = 0,
    now: float = 0.0,
    obj_type: ObjectType = ObjectType.KV_PAGE,
) -> list[AccessContext]:
    n = len(keys)
    size_of = _sizes(sizes, n)
    out = []
    prev = prev_key
    for i, key in enumerate(keys):
        out.append(
            AccessContext(
                now=now,
                position=i,
                batch_len=n,
                prefix_hits=prefix_len,
                size=size_of[i],
                prev_key=prev,
                request_len=prefix_len + n,
                obj_type=obj_type,
            )
        )
        prev = key
    return out


def get_contexts(
    keys: Sequence[str],
    sizes: Sequence[int] | int = 0,
    request_len: int = 0,
    now: float = 0.0,
    obj_type: ObjectType = ObjectType.KV_PAGE,
) -> list[AccessContext]:
    n = len(keys)
    size_of = _sizes(sizes, n)
    out = []
    prev: str | None = None
    for i, key in enumerate(keys):
        out.append(
            AccessContext(
                now=now,
                position=i,
                batch_len=n,
                prefix_hits=n,
                size=size_of[i],
                prev_key=prev,
                request_len=request_len,
                obj_type=obj_type,
            )
        )
        prev = key
    return out


def miss_context(found: int, batch_len: int, now: float = 0.0) -> AccessContext:
    return AccessContext(
        now=now, position=found, batch_len=batch_len, prefix_hits=found, request_len=batch_len
    )
