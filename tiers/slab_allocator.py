"""The DRAM tier's slot sizes, and its slab allocator (native: ``native.slab_allocator``).

A size class is an object size rounded up to 4 KiB (``slot_size_for``), so every slot is
page-aligned and KV pages (which have one size per model) waste less than one page each.
"""

from __future__ import annotations

from hicache_mooncake.native import SlabAllocator

ALIGN = 4096

__all__ = ["ALIGN", "SlabAllocator", "slot_size_for"]


def slot_size_for(nbytes: int) -> int:
    return max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
