"""A page's *parts*: the byte views (memoryviews into SGLang's host pool) that make one stored
object, back to back. A part may be any C-contiguous buffer; it is handled as raw bytes. Parts are
copied to and from arena slots by the native ``copy_slots`` (one call per batch, the GIL released
once), never part by part in Python."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import compress
from operator import attrgetter

from hicache_mooncake.native import page_sizes

Parts = Sequence[memoryview]

_NBYTES = attrgetter("nbytes")
_PART_SIZES = partial(map, _NBYTES)


def parts_nbytes(parts: Parts) -> int:
    return sum(map(_NBYTES, parts))


def pages_sizes(pages: Iterable[Parts]) -> list[int]:
    """Bytes of each page, in one native call (``native.page_sizes``)."""
    return page_sizes(pages if isinstance(pages, list | tuple) else list(pages))


def pages_nbytes(pages: Sequence[Parts], done: Sequence[bool] | None = None) -> int:
    """Bytes of all ``pages`` (of those whose ``done`` is true, when given)."""
    chosen = pages if done is None else compress(pages, done)
    return sum(map(sum, map(_PART_SIZES, chosen)))
