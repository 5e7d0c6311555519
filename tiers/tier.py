"""The contract between ``TieredStore`` and each storage tier (DRAM, SSD, remote pool, host cache):
batch first.

A tier stores immutable objects addressed by string keys. Payloads move as *parts*: a sequence
of writable/readable ``memoryview``s (one per contiguous run of SGLang's host pool, e.g. K and V
of a page). A put gathers an object's parts into one object; a get scatters an object back into
parts whose total length must equal the object's length.

The batch calls are the contract (the abstract methods): ``contains_batch``, ``put_batch``,
``get_batch_into``, ``remove_batch``, plus ``clear``, ``close`` and ``stats``. One store call is
one batch call per tier, so a tier can do its per-key work in one pass (one lock hold, one
native call, one round trip). The singular calls (``contains``, ``put``, ``get_into``,
``remove``) are one-key batches, derived here; tiers do not write them.

Shape (what the native data plane fills in):
- Keys in: a sequence of ``str``, in the caller's order; a key may appear twice (each answer is
  its own). Items in: ``(key, parts, ctx)`` in the caller's order.
- Fingerprints in (optional): ``contains_batch``, ``remove_batch`` and ``get_batch_into`` take
  ``fps``, the keys' (the items') 64-bit fingerprints (``hicache_mooncake.native.fingerprints(keys)``: a ``uint64`` array, one per
  key, same order), so a store call fingerprints its keys once at its entry and every tier
  indexed by fingerprints uses them instead of hashing the keys again. A tier that is not
  indexed by fingerprints ignores them. The keys stay the truth: a tier still checks the full
  key where it keeps one, so ``fps`` that do not match ``keys`` can only cause misses. None:
  the tier fingerprints the keys itself.
- Results out: one entry per key, in the same order, as a ``list[bool]`` (``remove_batch``: the
  count of keys that were present). The contract creates no per-key Python object of its own;
  a tier answers in whatever it computed (a converted native bool array is fine).
- Buffers: the caller owns every part; a tier borrows them for the duration of the call only
  and never touches them after it returned (a late read lands in the tier's own memory first).

Failure semantics, for every tier and every call:
- Partial failure is per key: each key's answer is independent (one key's I/O error, missing
  room or refusal does not fail the others); nothing raises for those.
- ``put_batch``: True when the object is stored (now, or already: values are immutable, a key
  that is present is left unchanged and answers True); False when it was not stored (no space,
  refused by admission, I/O error, deadline passed).
- ``get_batch_into``: True when the parts hold the object's bytes; False on a miss, a size
  mismatch, an I/O error or a deadline passed; on False the parts' contents are unspecified (the
  caller treats the page as not loaded).
- ``contains_batch``: index lookups only (a pool asks its nodes once per batch, within its
  timeout); True means a get issued now would find the key (it may still miss later).
- Deadlines: ``put_batch`` / ``get_batch_into`` take an absolute ``deadline``
  (``time.monotonic()``; None: the tier's own timeout). Work not finished by then is reported as
  not done (False). No call blocks longer than the tier's configured timeout.
- Every call is thread-safe; a closed tier answers miss / False / 0 and never raises.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from .events_sink import NULL_SINK, EventsSink
from .parts import Parts
from .policy.base import DEFAULT_CONTEXT, AccessContext

PutItem = tuple[str, Parts, AccessContext]
"""One object of a ``put_batch`` / ``get_batch_into``: its key, its parts, its access context."""


class Tier(ABC):
    """One storage tier; see the module docstring for the contract and its failure semantics."""

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

    # ------------------------------------------------------------------ the contract: batches
    @abstractmethod
    def contains_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> list[bool]:
        """Per key: does this tier hold it? (``fps``: the keys' fingerprints, module docstring.)"""

    @abstractmethod
    def put_batch(self, items: Sequence[PutItem], deadline: float | None = None) -> list[bool]:
        """Store each object; per item: stored (or present already)."""

    @abstractmethod
    def get_batch_into(
        self, items: Sequence[PutItem], deadline: float | None = None, *, fps: np.ndarray | None = None
    ) -> list[bool]:
        """Copy each object into its parts; per item: its bytes are there. (``fps``: the items'
        keys' fingerprints, module docstring.)"""

    @abstractmethod
    def remove_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> int:
        """Drop each key; returns how many were present. (``fps``: the keys' fingerprints.)"""

    @abstractmethod
    def clear(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release memory, files, threads and sockets; idempotent; never raises."""

    @abstractmethod
    def stats(self) -> dict[str, Any]: ...

    def entry_count(self) -> int | None:
        """Objects held, where the tier knows it in memory without waiting (None: it does not,
        e.g. a pool behind a network). Read without the tier's lock: an estimate."""
        return None

    # ------------------------------------------------------------------ one-key batches
    def contains(self, key: str) -> bool:
        return self.contains_batch((key,))[0]

    def put(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.put_batch(((key, parts, ctx),))[0]

    def get_into(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.get_batch_into(((key, parts, ctx),))[0]

    def remove(self, key: str) -> bool:
        """Drop ``key``; True if it was present."""
        return self.remove_batch((key,)) > 0
