"""Which DRAM pages to take out so that pages of one size can be stored (``RoomPlan``).

DRAM is cut into slabs of size classes (``tiers.slab_allocator``): a slot of class C is only made by
freeing a slot of class C or by emptying a whole slab (it then serves any class). When the class
of a set has no free slot and no slab is free, taking out pages of another class frees nothing
usable unless they are *all* the pages of one slab. ``tiers.DramTier.room_plan`` describes what can
make room; ``choose`` picks pages in recency order (oldest first) among those only:

- a page of the same class gives one slot;
- the oldest page of an *emptiable* slab (each of its used slots holds a published, unpinned
  page) brings the whole slab: all its pages are taken and ``per_slab`` slots are made;
- any other page (another class in a slab that cannot be emptied: a reserved, pinned or
  removed-but-still-read slot in it) is never taken: taking it would lose it for nothing.

When no page can make room, nothing is taken (the set is refused, DRAM keeps what it holds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple


class RoomPlan(NamedTuple):
    """What can make room for slots of one class (``DramTier.room_plan``)."""

    same_class: Callable[[int], bool]
    """Whether a page of this many bytes lives in a slot of the wanted class."""
    per_slab: int
    """Slots of the wanted class an emptied slab makes."""
    slab_of: dict[str, int]
    """Each page of another class that lies in an emptiable slab -> that slab."""
    slab_keys: dict[int, list[str]]
    """Each emptiable slab -> every page in it (taking them all empties it)."""


def choose(plan: RoomPlan, oldest_first: Iterable[tuple[str, int]], slots: int) -> list[str]:
    """Pages to take out, walking ``(key, nbytes)`` oldest first, until ``slots`` slots of the
    wanted class would be free: every page chosen makes room (see the module docstring). Pages
    of an emptiable slab that ``oldest_first`` does not list (DRAM holds them, the placement does
    not know them) are chosen with their slab. Fewer slots (possibly none) when nothing more can
    make room."""
    chosen: list[str] = []
    seen: set[str] = set()  # a key listed twice (``oldest_first`` may chain orders) counts once
    got = 0
    taken: set[int] = set()
    same, slab_of = plan.same_class, plan.slab_of
    for key, nbytes in oldest_first:
        if got >= slots:
            break
        if key in seen:
            continue
        if same(nbytes):
            seen.add(key)
            chosen.append(key)
            got += 1
            continue
        slab = slab_of.get(key)
        if slab is not None and slab not in taken:
            taken.add(slab)
            whole = plan.slab_keys[slab]
            chosen.extend(k for k in whole if k not in seen)
            seen.update(whole)
            got += plan.per_slab
    return chosen
