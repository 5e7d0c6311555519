"""``row_tuples``: n instances of a NamedTuple from shared and per-item fields, in one native call.

The policies get one ``AccessContext`` per key of every store call; built with
``map(tuple.__new__, ...)`` they cost ~30 us per 128 keys on the project's VM, a few microseconds
in one call. Item ``i``'s field ``j`` is, by ``kinds[j]``: ``SHARED`` ``fields[j]``, ``PER_ITEM``
``fields[j][i]`` (a sequence of ``n``), ``INDEX`` the int ``i``; each field is the object given
(a reference, no copy), so the result equals ``tuple.__new__(cls, row)`` of each row. ``cls``
must be a tuple subclass laid out as tuple (a NamedTuple; TypeError otherwise); a per-item field
of another length is a ValueError naming it. The GIL is held (objects are made).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from . import _core

SHARED, PER_ITEM, INDEX = 0, 1, 2

T = TypeVar("T", bound=tuple[Any, ...])


def row_tuples(cls: type[T], n: int, fields: tuple[Any, ...], kinds: bytes | Sequence[int]) -> list[T]:
    """``n`` instances of ``cls`` (module docstring)."""
    return _core.row_tuples(cls, n, fields, bytes(kinds))
