"""The reference model of the native ``SlabAllocator`` (``native/src/hm_slabs.c``): the DRAM
tier's size-class slab allocation as it ran in Python before it moved into the native core.
``tests/unit/test_slab_allocator.py`` holds the native allocator to it, state for state.

Size-class slab allocation of arena offsets (bookkeeping only; it never touches bytes).

The arena is cut into equal slabs. A slab belongs to at most one size class at a time; a size
class is an object size rounded up to 4 KiB, so every slot is page-aligned and KV pages (which
have one size per model) waste less than one page each. A slab whose slots are all free goes
back to the shared pool, so a workload can change page size without restarting.

Invariants: an offset is handed out at most once until freed; ``used_bytes`` is the sum of the
slot sizes handed out; objects larger than a slab are refused (``None``).

Resizing (``set_slab_limit``): slabs at or past the limit are *retired*: no slot is handed out in
them any more; their slots in use stay valid until freed, and a retired slab whose last slot is
freed is listed in ``released`` (its memory may be given back). Raising the limit again makes
retired slabs usable at once (their free slots included). ``max_slabs`` bounds the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    def __init__(self, capacity: int, slab_size: int, max_capacity: int | None = None) -> None:
        if slab_size <= 0 or slab_size % ALIGN:
            raise ValueError(f"slab_size must be a positive multiple of {ALIGN}, got {slab_size}")
        self.slab_size = slab_size
        self.slab_count = capacity // slab_size
        if self.slab_count == 0:
            raise ValueError(f"capacity {capacity} holds no slab of {slab_size} bytes")
        self.max_slabs = max(self.slab_count, (max_capacity or 0) // slab_size)
        self._free_slabs: list[int] = list(range(self.slab_count - 1, -1, -1))
        self.classes: dict[int, SizeClass] = {}
        self.used_bytes = 0
        self._retired_free: dict[int, tuple[int, list[int]]] = {}  # retired slab -> (slot size, free)
        self.released: list[int] = []  # retired slabs that became empty (memory may be given back)

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

    def alloc_many(self, nbytes: int, count: int) -> list[int]:
        """Up to ``count`` offsets of ``nbytes``' class, the ones ``count`` calls of ``alloc`` would
        hand out in the same order; fewer (possibly none) when the arena runs out."""
        size = slot_size_for(nbytes)
        if size > self.slab_size or count <= 0:
            return []
        cls = self.classes.get(size)
        if cls is None:
            cls = self.classes[size] = SizeClass(size, self.slab_size // size)
        out: list[int] = []
        while len(out) < count:
            if not cls.free_by_slab:
                if not self._free_slabs:
                    break
                slab = self._free_slabs.pop()
                base = slab * self.slab_size
                cls.free_by_slab[slab] = [base + i * size for i in range(cls.slots_per_slab - 1, -1, -1)]
                cls.used_by_slab[slab] = 0
            slab, free = next(iter(cls.free_by_slab.items()))
            take = min(count - len(out), len(free))
            out.extend(reversed(free[len(free) - take :]))
            del free[len(free) - take :]
            if not free:
                del cls.free_by_slab[slab]
            cls.used_by_slab[slab] += take
        self.used_bytes += size * len(out)
        return out

    def free(self, offset: int, nbytes: int) -> None:
        size = slot_size_for(nbytes)
        cls = self.classes[size]
        slab = offset // self.slab_size
        cls.used_by_slab[slab] -= 1
        self.used_bytes -= size
        retired = slab >= self.slab_count
        if cls.used_by_slab[slab] == 0:
            del cls.used_by_slab[slab]
            cls.free_by_slab.pop(slab, None)
            if retired:
                self._retired_free.pop(slab, None)
                self.released.append(slab)
            else:
                self._free_slabs.append(slab)
        elif retired:
            self._retired_free[slab][1].append(offset)
        else:
            cls.free_by_slab.setdefault(slab, []).append(offset)

    def free_many(self, offsets: Sequence[int], nbytes: int) -> None:
        """``free`` of each of ``offsets`` (slots of ``nbytes``' class, each handed out once), in
        order, one step per slab touched: the same free lists in the same order, slabs emptied
        returned (or listed in ``released``) in the order their last slot was freed."""
        size = slot_size_for(nbytes)
        cls = self.classes[size]
        by_slab: dict[int, list[int]] = {}
        slab_size = self.slab_size
        for offset in offsets:
            by_slab.setdefault(offset // slab_size, []).append(offset)
        used, free_by_slab = cls.used_by_slab, cls.free_by_slab
        for slab, freed in by_slab.items():  # checked before anything changes
            if used.get(slab, 0) < len(freed):
                raise ValueError(f"slab {slab}: {len(freed)} slots freed, {used.get(slab, 0)} in use")
        emptied: list[tuple[int, int]] = []  # (position of the slab's last freed slot, slab)
        for slab, freed in by_slab.items():
            left = used[slab] - len(freed)
            if left == 0:
                emptied.append((offsets.index(freed[-1]) if len(by_slab) > 1 else 0, slab))
                continue
            used[slab] = left
            if slab >= self.slab_count:
                self._retired_free[slab][1].extend(freed)
            else:
                free_by_slab.setdefault(slab, []).extend(freed)
        self.used_bytes -= size * len(offsets)
        for _at, slab in sorted(emptied):
            del used[slab]
            free_by_slab.pop(slab, None)
            if slab >= self.slab_count:
                self._retired_free.pop(slab, None)
                self.released.append(slab)
            else:
                self._free_slabs.append(slab)

    # ------------------------------------------------------------------ resizing
    def set_slab_limit(self, count: int) -> list[int]:
        """Use slabs ``[0, count)`` from now on (``1 <= count <= max_slabs``). Returns the slabs that
        became usable again (their memory must be present before the next ``alloc``: the caller
        makes it so before calling this); lowering the limit retires the slabs past it (see the
        module docstring), and those already empty are listed in ``released`` at once."""
        if not 1 <= count <= self.max_slabs:
            raise ValueError(f"slab count must be in 1..{self.max_slabs}, got {count}")
        old, self.slab_count = self.slab_count, count
        revived: list[int] = []
        if count < old:
            in_use = {slab for cls in self.classes.values() for slab in cls.used_by_slab}
            self._free_slabs = [slab for slab in self._free_slabs if slab < count]
            for slab in range(count, old):
                if slab not in in_use:
                    self.released.append(slab)
            for cls in self.classes.values():
                for slab in [s for s in cls.free_by_slab if s >= count]:
                    self._retired_free[slab] = (cls.slot_size, cls.free_by_slab.pop(slab))
                for slab in cls.used_by_slab:
                    if slab >= count and slab not in self._retired_free:
                        self._retired_free[slab] = (cls.slot_size, [])
        else:
            in_use = {slab for cls in self.classes.values() for slab in cls.used_by_slab}
            for slab in range(old, count):
                revived.append(slab)
                kept = self._retired_free.pop(slab, None)
                if kept is not None:
                    size, free = kept
                    if free:
                        self.classes[size].free_by_slab[slab] = free
                elif slab not in in_use:
                    self._free_slabs.insert(0, slab)
            self.released = [slab for slab in self.released if slab >= count]
        return revived

    def is_retired(self, offset: int) -> bool:
        return offset // self.slab_size >= self.slab_count

    @property
    def retired_in_use(self) -> int:
        """Retired slabs that still hold slots in use."""
        return sum(1 for cls in self.classes.values() for slab in cls.used_by_slab if slab >= self.slab_count)

    def take_released(self) -> list[int]:
        out, self.released = self.released, []
        return out

    def largest_class(self) -> int | None:
        """The slot size of the class holding the most slabs (the one to steal from)."""
        best = max(self.classes.values(), key=lambda c: c.slab_count, default=None)
        return best.slot_size if best is not None and best.slab_count else None

    def state(self) -> tuple[object, ...]:
        """The whole bookkeeping in the native ``SlabAllocator.state()``'s form."""
        classes = {
            size: (list(c.free_by_slab.items()), list(c.used_by_slab.items()))
            for size, c in self.classes.items()
        }
        retired = {slab: (size, list(free)) for slab, (size, free) in self._retired_free.items()}
        return classes, list(self._free_slabs), retired, list(self.released), self.used_bytes

    def reset(self) -> None:
        self._free_slabs = list(range(self.slab_count - 1, -1, -1))
        self.classes.clear()
        self._retired_free.clear()
        self.used_bytes = 0
