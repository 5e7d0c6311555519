"""What a memory node (and the host cache, which is one) serves: the store protocol of
``NodeServer``. transport/ defines it and knows no implementation; the store lives in tiers/
(``tiers.arena_store.ArenaStore``, the same ``TieredStore`` a process uses in-process).

The store owns one arena (anonymous memory, or a shared-memory file created from the server's
``ArenaSpec`` so same-host clients map it). Offsets on the wire index ``view``, the whole mapping.

- Writers ``reserve`` slots (two-sided: the server receives the body into the slot; one-sided: the
  client writes it), then ``commit`` (visible from then on) or ``abort``. Only objects the store
  ``fits`` are asked for: the server refuses larger ones itself, so a store may make room (evict)
  for every object it is asked to reserve. A reservation belongs to
  an ``owner`` (the connection): ``release_owner`` aborts what a dropped connection still holds, so
  a client that dies leaves no space reserved.
- One-sided readers ``lookup`` (the store may bring the object into the arena first, e.g. from
  its SSD, within the deadline) and validate the ``ObjectHeader`` at ``SlotRef.header`` around
  their copy; they pin nothing. Two-sided readers ``pin`` what the server sends and ``unpin`` it.
- Every method is thread-safe (one server thread per connection), never raises for a miss or a
  full store (statuses and ``False``), and returns within its ``deadline``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..wire import RESERVED_BUSY, RESERVED_NEW, RESERVED_NO_SPACE, RESERVED_PRESENT, SetHint

__all__ = [
    "RESERVED_BUSY",
    "RESERVED_NEW",
    "RESERVED_NO_SPACE",
    "RESERVED_PRESENT",
    "PinnedBody",
    "ServedStore",
]


@dataclass(frozen=True, slots=True)
class PinnedBody:
    """A committed body pinned for a two-sided send; unchanged until ``unpin``."""

    offset: int
    size: int
    obj_type: int
    handle: Any


class ServedStore(Protocol):
    @property
    def view(self) -> memoryview:
        """The whole arena mapping (format ``B``); wire offsets index it."""
        ...

    @property
    def shm_path(self) -> str:
        """The shared-memory arena file ("" when the arena is not shared)."""
        ...

    @property
    def data_offset(self) -> int:
        """Where objects start in ``view`` (after the arena's header page when shared)."""
        ...

    def fits(self, nbytes: int) -> bool:
        """Could an object of ``nbytes`` ever be reserved (it fits the largest slot, however much
        is evicted)? The server refuses the others before ``reserve``, so nothing is evicted for
        a reservation that cannot be granted. Cheap and lock-free: asked per object size."""
        ...

    def exists(self, keys: Sequence[str]) -> list[bool]: ...

    def lookup(self, items: Sequence[tuple[str, int]], deadline: float) -> np.ndarray:
        """``(key, expected size; 0: any)`` -> where the committed body and its header are: one
        record per item (``wire.lookup_records``: the fields of a ``SlotRef``)."""
        ...

    def pin(self, items: Sequence[tuple[str, int]], deadline: float) -> list[PinnedBody | None]: ...

    def unpin(self, pins: Sequence[PinnedBody]) -> None: ...

    def reserve(
        self, items: Sequence[tuple[str, int, int]], owner: object, hint: SetHint, deadline: float
    ) -> np.ndarray:
        """``(key, size, object type)`` -> one record per item (``wire.alloc_records``):
        ``status`` (``RESERVED_*``), and for ``RESERVED_NEW`` the body's wire ``offset`` and the
        ``version`` to commit."""
        ...

    def commit(self, items: Sequence[tuple[str, int]], owner: object, deadline: float) -> list[bool]:
        """``(key, version)`` of ``owner``'s reservations -> stored (a reservation of another owner
        or version is False)."""
        ...

    def abort(self, items: Sequence[tuple[str, int]], owner: object) -> None: ...

    def writable(self, offset: int, length: int) -> bool:
        """Does ``[offset, offset + length)`` lie in one open reservation's body (WRITE_AT)?"""
        ...

    def readable(self, offset: int, length: int) -> bool:
        """Does ``[offset, offset + length)`` lie in one committed object's body or header (READ_AT)?"""
        ...

    def owns_pending(self, owner: object) -> bool: ...

    def release_owner(self, owner: object) -> int:
        """Abort every reservation ``owner`` still holds; returns how many."""
        ...

    def remove(self, keys: Sequence[str]) -> list[bool]: ...

    def clear(self) -> int: ...

    def stats(self) -> dict[str, Any]:
        """At least ``objects``, ``pending``, ``capacity`` and ``used`` (bytes)."""
        ...

    def close(self) -> None:
        """Release the arena (and whatever the store holds); idempotent, never raises."""
        ...
