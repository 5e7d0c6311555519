"""SlabAllocator: the DRAM tier's size-class slab allocation of arena offsets (bookkeeping only;
it never touches the arena's bytes), native.

Why native: the tier takes a call's slots under its lock once per store call; in Python a run of
128 slots cost ~20 us (list slicing, dict lookups), and every free slot of a slab in use was a
Python int in a list (36 bytes each: ~0.9% of a 4 KiB-page arena). Here a call of 128 slots is one
C loop, and every slot of a slab in use costs 4 bytes (its room on the slab's stack of free
slots) and a bit (whether it is in use), free or not; a free slab costs nothing.

The arena is cut into equal slabs. A slab belongs to at most one size class at a time (a slot
size: a multiple of 4 KiB, ``tiers.slab_allocator.slot_size_for``); a slab whose slots are all
free goes back to the shared pool, so a workload can change page size without restarting.

Order (held state for state to the Python model ``tests/unit/slab_allocator_reference.py``,
which was the product's allocator before): a class's slabs with free slots form a list in the
order they got free slots, and a slot comes from the first of them, from the top of its stack of
free slots (a freed slot is pushed); a slab is carved from the top of the free-slab stack with its
lowest slot first; an emptied slab is pushed back.

Resizing (``set_slab_limit``): slabs at or past the limit are *retired*: no slot is handed out in
them any more; their slots in use stay valid until freed, and a retired slab whose last slot is
freed is listed in ``released`` (its memory may be given back; ``take_released``). Raising the
limit makes retired slabs usable at once (their free slots included). ``max_slabs`` bounds it.

Errors: every offset and size is checked before anything changes. Freeing a slot not in use
(twice), an offset of another class, between slots or outside the arena, or a batch that lists a
slot twice: ValueError naming it, the allocator unchanged. Objects larger than a slab are refused
(``alloc``: None; ``alloc_batch``: None, counted as too large). Every call holds the GIL; the tier's
lock serialises its callers.
"""

from __future__ import annotations

from ._core import SlabAllocator

__all__ = ["SlabAllocator"]
