"""What ``batch_exists_v2`` answers for a hybrid model, from which objects are present.

Input: the span's KV prefix ``kv_pages`` and, per sidecar pool, whether each page of the span has
that pool's object. Output (SGLang's ``PoolTransferResult`` fields):

- ``restorable``: every prefix length (in pages, 1..kv_pages) at which the request can resume;
  each pool removes the lengths it cannot serve:
  - ``ALL_PAGES`` (indexer, DeepSeek V4 compressed KV): pages ``[0, p)`` must all be present;
  - ``TRAILING_PAGES`` (Mamba state, SWA window): the last ``window`` pages before ``p`` must be
    present (``window`` = the transfer's key count, at least 1), so holes are kept: with states
    at pages 2 and 5 only, 5 and 2 are restorable while 4 and 3 are not;
  - ``BLOCK_GROUPS``: never removes a length (its own verdict only, below);
- ``kv_hit_pages``: the largest restorable length (0 when none);
- ``pool_hits``: per pool, its own verdict (omitted when 0, as SGLang's backends do): the KV
  prefix, the ALL_PAGES boundary, the largest TRAILING stop point, or the pages covered by the
  leading complete BLOCK_GROUPS groups.

BLOCK_GROUPS (defined by SGLang 0.5.23, constructed by none of its components yet): the span is cut
from its start into blocks of ``block_pages`` pages; block ``g``'s group is the ``group_pages``
pages that END block ``g`` (a block's compressed form is known once the block is complete, so it
is keyed by the page hash at its boundary). The verdict counts whole blocks from the span start
while their group is complete; a trailing partial block never counts. Invalid geometry (a size of
0, or a group larger than its block) is verdict 0.

Pools are applied in the caller's order; once no length is left the remaining pools give no
verdict (SGLang then learns nothing about them from this query), as in SGLang's file and Mooncake
backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ALL_PAGES = "all_pages"
TRAILING_PAGES = "trailing_pages"
BLOCK_GROUPS = "block_groups"


@dataclass(frozen=True)
class PoolQuery:
    name: str
    policy: str
    present: Sequence[bool]
    """Per page of the span (at least ``kv_pages`` long; the whole span for BLOCK_GROUPS)."""
    window: int = 1
    block_pages: int = 0
    group_pages: int = 0


@dataclass(frozen=True)
class HitResult:
    kv_hit_pages: int
    pool_hits: dict[str, int]
    restorable: list[int]


def evaluate(kv_pages: int, queries: Sequence[PoolQuery]) -> HitResult:
    hits: dict[str, int] = {"kv": kv_pages} if kv_pages else {}
    restorable = list(range(1, kv_pages + 1))
    for q in queries:
        if q.policy == BLOCK_GROUPS:
            covered = block_group_pages(q.present, q.block_pages, q.group_pages)
            if covered:
                hits[q.name] = covered
            continue
        if not restorable:
            break
        if q.policy == ALL_PAGES:
            boundary = next((i for i in range(kv_pages) if not q.present[i]), kv_pages)
            allowed = set(range(1, boundary + 1))
        elif q.policy == TRAILING_PAGES:
            allowed = trailing_stop_points(q.present, kv_pages, max(1, q.window))
            boundary = max(allowed, default=0)
        else:
            raise ValueError(f"unknown pool hit policy {q.policy!r} for pool {q.name}")
        if boundary:
            hits[q.name] = boundary
        restorable = [p for p in restorable if p in allowed]
    return HitResult(restorable[-1] if restorable else 0, hits, restorable)


def trailing_stop_points(present: Sequence[bool], kv_pages: int, window: int) -> set[int]:
    """Prefix lengths ``p`` in 1..kv_pages whose last ``window`` pages are all present (linear:
    a running count of consecutive present pages)."""
    out: set[int] = set()
    run = 0
    for i in range(kv_pages):
        run = run + 1 if present[i] else 0
        p = i + 1
        if run >= min(window, p):
            out.add(p)
    return out


def block_group_pages(present: Sequence[bool], block_pages: int, group_pages: int) -> int:
    if block_pages <= 0 or group_pages <= 0 or group_pages > block_pages:
        return 0
    covered = 0
    for end in range(block_pages, len(present) + 1, block_pages):
        if not all(present[end - group_pages : end]):
            break
        covered = end
    return covered


def pages_needed(kv_pages: int, span: int, queries_policies: Sequence[str]) -> int:
    """How many leading pages of the span a presence query must cover."""
    return span if BLOCK_GROUPS in queries_policies else kv_pages
