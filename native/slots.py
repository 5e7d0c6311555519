"""Pages copied to and from the slots of one arena (the DRAM tier's copy), one native call each.

A *page* is a sequence of parts (each any C-contiguous buffer: views into SGLang's host pool);
page ``i``'s parts lie back to back in the arena from ``slot_offsets[i]`` on. ``copy_slots`` borrows
every part and checks every range against the arena with the GIL held, then copies the whole batch
with the GIL released once (for more than 64 KiB). All or nothing: ValueError (a range outside the
arena, naming page and part), BufferError (a part that is not one C-contiguous buffer, or not
writable where it is copied into), TypeError (a page that is not a sequence), and no byte
moved. ``page_sizes`` reads each page's length without copying (any buffer, strided included; a
part that is not a buffer is a BufferError naming it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _core
from ._arrays import U64, as_u64


def copy_slots(arena: Any, slot_offsets: Any, pages: Sequence[Sequence[Any]], into_arena: bool) -> None:
    """``into_arena``: each page's parts into ``arena`` from ``slot_offsets[i]`` on; else the
    arena's bytes from there out into the parts (which must be writable)."""
    _core.copy_slots(arena, as_u64("slot_offsets", slot_offsets), pages, into_arena)


def page_sizes(pages: Sequence[Sequence[Any]]) -> list[int]:
    """Bytes of each page (its parts together), in one native pass."""
    out = np.empty(len(pages), dtype=U64)
    _core.page_sizes(pages, out)
    return out.tolist()
