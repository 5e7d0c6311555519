"""Size-class slab allocation of arena offsets (bookkeeping only; it never touches bytes).

The arena is cut into equal slabs. A slab belongs to at most one size class at a time; a size
class is an object size rounded up to 4 KiB, so every slot is page-aligned and KV pages (which
have one size per model) waste less than one page each. A slab whose slots are all free goes
back to the shared pool, so a workload can change page size without restarting.

Invariants: an offset is handed out at most once until freed; ``used_bytes`` is the sum of the
slot sizes handed out; objects larger than a slab are refused (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALIGN = 4096


def slot_size_for(nbytes: int) -> int:
    return max(ALIGN, -(-nbytes // ALIGN) * ALIGN)


@dataclass
class SizeClass:
    slot_size: int
    slots_per_slab: int
    free_by_slab: dict[int, list[int]] = field(default_factory=dict)
    used_by_slab: dict[int, int] = field(default_factory=dict)

    @property
    def slab_count(self) -> int:
        return len(self.used_by_slab)


class SlabAllocator:
    def __init__(self, capacity: int, slab_size: int) -> None:
        if slab_size <= 0 or slab_size % ALIGN:
            raise ValueError(f"slab_size must be a positive multiple of {ALIGN}, got {slab_size}")
        self.slab_size = slab_size
        self.slab_count = capacity // slab_size
        if self.slab_count == 0:
            raise ValueError(f"capacity {capacity} holds no slab of {slab_size} bytes")
        self._free_slabs: list[int] = list(range(self.slab_count - 1, -1, -1))
        self.classes: dict[int, SizeClass] = {}
        self.used_bytes = 0

    @property
    def capacity(self) -> int:
        return self.slab_count * self.slab_size

    @property
    def free_slab_count(self) -> int:
        return len(self._free_slabs)

    def fits(self, nbytes: int) -> bool:
        return slot_size_for(nbytes) <= self.slab_size

    def alloc(self, nbytes: int) -> int | None:
        """An offset of a free slot of ``nbytes``' class, or None when none is free."""
        size = slot_size_for(nbytes)
        if size > self.slab_size:
            return None
        cls = self.classes.get(size)
        if cls is None:
            cls = self.classes[size] = SizeClass(size, self.slab_size // size)
        if not cls.free_by_slab:
            if not self._free_slabs:
                return None
            slab = self._free_slabs.pop()
            base = slab * self.slab_size
            cls.free_by_slab[slab] = [base + i * size for i in range(cls.slots_per_slab - 1, -1, -1)]
            cls.used_by_slab[slab] = 0
        slab, free = next(iter(cls.free_by_slab.items()))
        offset = free.pop()
        if not free:
            del cls.free_by_slab[slab]
        cls.used_by_slab[slab] += 1
        self.used_bytes += size
        return offset

    def free(self, offset: int, nbytes: int) -> None:
        size = slot_size_for(nbytes)
        cls = self.classes[size]
        slab = offset // self.slab_size
        cls.used_by_slab[slab] -= 1
        self.used_bytes -= size
        if cls.used_by_slab[slab] == 0:
            del cls.used_by_slab[slab]
            cls.free_by_slab.pop(slab, None)
            self._free_slabs.append(slab)
        else:
            cls.free_by_slab.setdefault(slab, []).append(offset)

    def largest_class(self) -> int | None:
        """The slot size of the class holding the most slabs (the one to steal from)."""
        best = max(self.classes.values(), key=lambda c: c.slab_count, default=None)
        return best.slot_size if best is not None and best.slab_count else None

    def reset(self) -> None:
        self._free_slabs = list(range(self.slab_count - 1, -1, -1))
        self.classes.clear()
        self.used_bytes = 0
