"""Reference hit rates under the replay rule of issue 5: classic LRU and Belady's OPT.

Replay rule: for each request in order, its hits are the leading run of its blocks that are
cached; then every block of the request is accessed (hit: refreshed; miss: inserted) in order.
Hit rate = hits / all blocks. Capacity is a number of blocks.

- LRU: classic, in access order; on an insertion beyond capacity the least recently accessed
  block goes.
- OPT: on each insertion beyond capacity, evict the cached block (the one just inserted
  included) whose next use, by request index, is furthest in the future (never used again =
  infinitely far). Ties are broken by the smaller (older) heap entry; any tie-break gives the same
  hit count for the prefix rule only up to ties, which the issue allows.
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


def opt_hits(reqs: Blocks, capacity: int, nxt: list[list[int]] | None = None) -> int:
    """Number of block hits of Belady's OPT (furthest next use by request index)."""
    if nxt is None:
        nxt = next_uses(reqs)
    cache: dict[int, int] = {}  # block -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, block); stale entries skipped lazily
    hits = 0
    for i, req in enumerate(reqs):
        hits += _leading_hits(req, cache)
        row = nxt[i]
        for j, b in enumerate(req):
            nu = row[j]
            cache[b] = nu
            heapq.heappush(heap, (-nu, b))
            while len(cache) > capacity:
                neg, victim = heapq.heappop(heap)
                if cache.get(victim) == -neg:
                    del cache[victim]
        if len(heap) > 4 * capacity + 1024:  # drop stale entries now and then
            heap = [(-nu, b) for b, nu in cache.items()]
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
