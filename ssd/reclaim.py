"""Region reclaim policy: FIFO victim choice and hit-based reinsertion selection.

Regions are evicted whole, oldest sealed first (FIFO by generation). A region with readers or
writers in flight is skipped (never evicted under I/O). When reinsertion is enabled, entries of
the victim that were hit at least ``reinsertion_hits`` times while the region aged are rewritten
into the active region (up to ``reinsertion_fraction`` of a region per reclaim); the others are
dropped from the index and reported through ``on_evict``. This approximates LRU on FIFO regions
(CacheLib Navy's hits-based reinsertion).

The functions only decide (called with the core lock held); :class:`Reclaimer` (in
:mod:`.reclaimer`) does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .format import entry_size
from .index import Index, Location
from .region import Region, RegionState


def pick_victim(fifo: Sequence[int], regions: Sequence[Region], dir_index: int | None) -> Region | None:
    """Oldest sealed, unpinned region (of ``dir_index`` when given)."""
    for rid in fifo:
        r = regions[rid]
        if r.state is RegionState.SEALED and not r.pinned and (dir_index is None or r.dir_index == dir_index):
            return r
    return None


def split_for_reinsertion(
    victim: Region,
    index: Index,
    names: list[str],
    fps: np.ndarray,
    reinsertion_hits: int,
    budget_bytes: int,
    keep: Callable[[str], bool] | None = None,
) -> tuple[list[tuple[str, Location]], list[str]]:
    """Return ``(hot, evicted)`` among the victim's entries ``names`` (fingerprints ``fps``):
    hot entries stay indexed (to be rewritten), the others are removed (lock held).

    An entry is hot when it was hit ``reinsertion_hits`` times, or when ``keep(key)`` says its
    owner still wants it; either way within ``budget_bytes`` per reclaim. Entries no longer
    indexed in the victim's generation are neither."""
    hot: list[tuple[str, Location]] = []
    evicted: list[str] = []
    used = 0
    locs = index.lookup(fps)
    hits = index.hits_many(fps) if reinsertion_hits > 0 else [0] * len(names)
    drop: list[int] = []
    seen: set[int] = set()
    for i, (key, loc) in enumerate(zip(names, locs, strict=True)):
        if loc is None or loc.region != victim.rid or loc.gen != victim.gen or int(fps[i]) in seen:
            continue
        seen.add(int(fps[i]))
        size = entry_size(loc.length)
        wanted = (reinsertion_hits > 0 and hits[i] >= reinsertion_hits) or (keep is not None and keep(key))
        if wanted and used + size <= budget_bytes:
            hot.append((key, loc))
            used += size
        else:
            drop.append(i)
            evicted.append(key)
    if drop:
        index.pop_if_many(fps[drop], victim.rid, victim.gen)
    return hot, evicted


def drop_all(victim: Region, index: Index) -> list[str]:
    """Remove every index entry still pointing into ``victim`` (lock held); returns the keys
    removed where they are in memory. Otherwise (the region's summary holds them) they are left
    in ``victim.untold`` for :func:`~.names.tell_untold`, and none is returned."""
    fps = np.frombuffer(victim.fps, np.uint64).copy()
    removed = index.pop_if_many(fps, victim.rid, victim.gen)
    out: list[str] = []
    if victim.names is not None:
        out = [k for k, gone in zip(victim.names, removed.tolist(), strict=True) if gone]
    elif removed.any():
        victim.untold = (fps[removed], victim.gen, victim.epoch)
    victim.reset_entries()
    return out
