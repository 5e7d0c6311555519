"""The contract between ``TieredStore`` and each storage tier (DRAM, remote DRAM, SSD).

A tier stores immutable objects addressed by string keys. Payloads move as *parts*: a sequence
of writable/readable ``memoryview``s (one per contiguous run of SGLang's host pool, e.g. K and V
of a page). ``put`` gathers the parts into one object; ``get_into`` scatters an object back into
parts whose total length must equal the object's length.

Failure semantics, for every tier:
- ``put`` returns False when the object was not stored (no space, refused by admission, I/O
  error); it never raises for those. A key that is already present is left unchanged and
  ``put`` returns True (values are immutable).
- ``get_into`` returns False on a miss, a size mismatch or an I/O error; on False the contents of
  the destination parts are unspecified (the caller treats the page as not loaded).
- The batched calls take an absolute ``deadline`` (``time.monotonic()``; None: the tier's own
  timeout); work not finished by then is reported as not done (a miss, or False). No method
  blocks longer than the tier's configured timeout.
- Every method is thread-safe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from .events_sink import NULL_SINK, EventsSink
from .parts import Parts
from .policy.base import DEFAULT_CONTEXT, AccessContext


class Tier(ABC):
    """One storage tier; see the module docstring for the failure semantics."""

    name: str = ""
    write_through: bool = False
    """Receive every set (besides the first tier that stores it), e.g. the shared pool."""
    put_skips_present: bool = False
    """``put_batch`` answers True for keys it holds without taking their bytes again (the store then
    skips asking ``contains_batch`` first: one round trip less per set)."""
    events: EventsSink = NULL_SINK
    """Told what this tier stores, drops and clears (``events_sink``; ``TieredStore.set_events``)."""

    def register_memory(self, regions: Sequence[memoryview]) -> None:  # noqa: B027
        """Caller buffers pages will move from/into (see ``TieredStore.register_memory``);
        tiers whose transport needs registered memory override this (default: nothing to do)."""

    def should_promote(self, key: str, ctx: AccessContext) -> bool:
        """After a hit here, copy the object into the tiers above? (default: no)."""
        return False

    @abstractmethod
    def contains(self, key: str) -> bool: ...

    @abstractmethod
    def put(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool: ...

    @abstractmethod
    def get_into(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool: ...

    @abstractmethod
    def remove(self, key: str) -> bool:
        """Drop ``key``; True if it was present."""

    @abstractmethod
    def clear(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release memory, files, threads and sockets; idempotent; never raises."""

    @abstractmethod
    def stats(self) -> dict[str, Any]: ...

    # Batched forms. Tiers that can coalesce I/O (SSD, remote) override these.
    def put_batch(
        self, items: Sequence[tuple[str, Parts, AccessContext]], deadline: float | None = None
    ) -> list[bool]:
        return [self.put(key, parts, ctx) for key, parts, ctx in items]

    def get_batch_into(
        self, items: Sequence[tuple[str, Parts, AccessContext]], deadline: float | None = None
    ) -> list[bool]:
        return [self.get_into(key, parts, ctx) for key, parts, ctx in items]

    def contains_batch(self, keys: Sequence[str]) -> list[bool]:
        return [self.contains(key) for key in keys]

    def entry_count(self) -> int | None:
        """Objects held, where the tier knows it in memory without waiting (None: it does not,
        e.g. a pool behind a network). Read without the tier's lock: an estimate."""
        return None
