"""Reference hit rates under the replay rule of issue 5: classic LRU and Belady's OPT.

Replay rule: for each request in order, its hits are the leading run of its blocks that are
cached; then every block of the request is accessed (hit: refreshed; miss: inserted) in order.
Hit rate = hits / all blocks. Capacity is a number of blocks.

- LRU: classic, in access order; on an insertion beyond capacity the least recently accessed
  block goes.
- OPT: on each insertion beyond capacity, evict the cached block (the one just inserted
  included) whose next use, by request index, is furthest in the future (never used again =
  infinitely far); among blocks next used by the same request, the one deepest in it (a hit
  needs every block before it, so a deeper block is worth no more than a shallower one). Without
  that tie-break OPT could keep the last block of a prefix and drop its first, and report fewer
  hits than LRU or a policy.

  On a prefix-closed trace (every block id always follows the same id: Mooncake's ``hash_ids``,
  which hash the whole prefix) this is optimal under the replay rule, so no policy reaches more
  hits (checked against exhaustive search on small traces, tests/unit/test_replay_opt_bound.py).
  On other traces it is a heuristic, not a bound: ``is_prefix_closed`` tells them apart.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence

Blocks = Sequence[Sequence[int]]

_NEVER = 1 << 62


def total_blocks(reqs: Blocks) -> int:
    return sum(len(r) for r in reqs)


def unique_blocks(reqs: Blocks) -> int:
    return len({b for r in reqs for b in r})


def capacity_blocks(reqs: Blocks, fraction: float, unique: int | None = None) -> int:
    """Capacity in blocks for a fraction of the trace's unique blocks (at least 1)."""
    if fraction <= 0:
        raise ValueError(f"capacity fraction must be > 0, got {fraction}")
    n = unique_blocks(reqs) if unique is None else unique
    return max(1, int(fraction * n))


def _leading_hits(req: Sequence[int], cache: object) -> int:
    hits = 0
    for b in req:
        if b in cache:  # type: ignore[operator]
            hits += 1
        else:
            break
    return hits


def lru_hits(reqs: Blocks, capacity: int) -> int:
    """Number of block hits of classic LRU with ``capacity`` blocks."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for req in reqs:
        hits += _leading_hits(req, cache)
        for b in req:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hits


def next_uses(reqs: Blocks) -> list[list[int]]:
    """``out[i][j]``: index of the next request after ``i`` that contains ``reqs[i][j]``."""
    last: dict[int, int] = {}
    out: list[list[int]] = [[] for _ in reqs]
    for i in range(len(reqs) - 1, -1, -1):
        out[i] = [last.get(b, _NEVER) for b in reqs[i]]
        for b in reqs[i]:
            last[b] = i
    return out


def next_use_positions(reqs: Blocks) -> list[list[int]]:
    """``out[i][j]``: where ``reqs[i][j]`` stands in the next request that contains it (0 when
    none does)."""
    last: dict[int, int] = {}
    out: list[list[int]] = [[] for _ in reqs]
    for i in range(len(reqs) - 1, -1, -1):
        out[i] = [last.get(b, 0) for b in reqs[i]]
        seen: dict[int, int] = {}  # a block twice in one request: its first place
        for j, b in enumerate(reqs[i]):
            seen.setdefault(b, j)
        last.update(seen)
    return out


def is_prefix_closed(reqs: Blocks) -> bool:
    """Whether every block id always follows the same id (the first block of a request: none)."""
    parent: dict[int, int | None] = {}
    for req in reqs:
        prev: int | None = None
        for b in req:
            if parent.setdefault(b, prev) != prev:
                return False
            prev = b
    return True


def opt_hits(reqs: Blocks, capacity: int, nxt: list[list[int]] | None = None) -> int:
    """Number of block hits of Belady's OPT under the replay rule (furthest next use by request
    index; among the same next use, the deepest block in that request goes first)."""
    if nxt is None:
        nxt = next_uses(reqs)
    depth = next_use_positions(reqs)
    cache: dict[int, tuple[int, int]] = {}  # block -> (its next use, its position there)
    heap: list[tuple[int, int, int]] = []  # (-next use, -position, block); stale entries skipped lazily
    hits = 0
    for i, req in enumerate(reqs):
        hits += _leading_hits(req, cache)
        row, at = nxt[i], depth[i]
        for j, b in enumerate(req):
            nu, pos = row[j], at[j]
            cache[b] = (nu, pos)
            heapq.heappush(heap, (-nu, -pos, b))
            while len(cache) > capacity:
                neg_nu, neg_pos, victim = heapq.heappop(heap)
                if cache.get(victim) == (-neg_nu, -neg_pos):
                    del cache[victim]
        if len(heap) > 4 * capacity + 1024:  # drop stale entries now and then
            heap = [(-nu, -pos, b) for b, (nu, pos) in cache.items()]
            heapq.heapify(heap)
    return hits


def lru_hit_rate(reqs: Blocks, capacity: int) -> float:
    n = total_blocks(reqs)
    return lru_hits(reqs, capacity) / n if n else 0.0


def opt_hit_rate(reqs: Blocks, capacity: int, nxt: list[list[int]] | None = None) -> float:
    n = total_blocks(reqs)
    return opt_hits(reqs, capacity, nxt) / n if n else 0.0


def infinite_hit_rate(reqs: Blocks) -> float:
    """The hit rate of an unbounded cache (the ceiling for every policy)."""
    n = total_blocks(reqs)
    seen: set[int] = set()
    hits = 0
    for req in reqs:
        hits += _leading_hits(req, seen)
        seen.update(req)
    return hits / n if n else 0.0
