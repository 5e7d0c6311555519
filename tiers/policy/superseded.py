"""Trailing sidecar objects that a later one of the same chain made stale: the first to go.

A Mamba state, a compressor state or a sliding window (``base.TRAILING_TYPES``) is only useful at
the END of the prefix a request restores. When the caller stores one for a later page of the same
chain, it names the earlier ones of that chain (``TierPlacement.supersede``); those that are
resident become superseded: the placement evicts (and demotes) them before asking the policy for
a victim, whatever their recency, so no KV page and no end-of-chain state goes while one is left.

A superseded object becomes a normal one again when it is read (a request ended there after all),
or when its superseder leaves (it may be the end of the cached prefix again). An object read
twice is never superseded again while resident: more than one request restored there, so it
marks where requests branch off (a shared system prompt, a common document), which a later turn
of one of them does not make stale (one read is the continuing request's own).

Memory: one entry per resident trailing object and per superseded one; every entry is dropped
when its key leaves the placement (``gone``), so nothing outlives residency. Not thread-safe
(the placement's caller holds the lock); no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from .base import TRAILING_TYPES, ObjectType


class SupersededSet:
    def __init__(self) -> None:
        self.trailing: set[str] = set()  # resident trailing-type keys not read since stored
        self._reads: dict[str, int] = {}  # resident trailing-type keys read -> reads (1; 2 = shared)
        self._by: OrderedDict[str, str] = OrderedDict()  # superseded key -> superseder, oldest first
        self._of: dict[str, set[str]] = {}  # superseder -> the keys it superseded

    def __len__(self) -> int:
        return len(self._by)

    def __contains__(self, key: object) -> bool:
        return key in self._by

    @property
    def empty(self) -> bool:
        """Nothing tracked: ``gone`` is a no-op and ``first`` is None until a trailing object
        is stored."""
        return not (self.trailing or self._reads or self._by or self._of)

    def stored(self, key: str, obj_type: ObjectType) -> None:
        """``key`` was set (new or again): a trailing one is tracked and not superseded."""
        if obj_type in TRAILING_TYPES and self._reads.get(key, 0) < 2:
            self.trailing.add(key)
            self._unmark(key)

    def used(self, key: str) -> None:
        """``key`` was read: a request ends there, so it is not stale (and never again once read
        twice)."""
        if key in self.trailing:
            reads = self._reads[key] = self._reads.get(key, 0) + 1
            if reads >= 2:
                self.trailing.discard(key)
            self._unmark(key)

    def _unmark(self, key: str) -> None:
        by = self._by.pop(key, None)
        if by is not None:
            self._unlink(by, key)

    def supersede(self, keys: Iterable[str], by: str) -> None:
        """The resident trailing objects among ``keys`` are made stale by ``by`` (a later one)."""
        for key in keys:
            if key == by or key not in self.trailing:
                continue
            old = self._by.pop(key, None)
            if old is not None:
                self._unlink(old, key)
            self._by[key] = by
            self._of.setdefault(by, set()).add(key)

    def gone(self, key: str) -> None:
        """``key`` left the placement: forget it; what it superseded is no longer stale."""
        self.trailing.discard(key)
        self._reads.pop(key, None)
        self._unmark(key)
        for stale in self._of.pop(key, ()):
            self._by.pop(stale, None)

    def first(self) -> str | None:
        """The longest superseded key (None when there is none)."""
        return next(iter(self._by), None)

    def oldest(self) -> Iterator[str]:
        """Superseded keys, the longest superseded first (callers must not change the set while
        iterating)."""
        return iter(self._by)

    def clear(self) -> None:
        self.trailing.clear()
        self._reads.clear()
        self._by.clear()
        self._of.clear()

    def _unlink(self, by: str, key: str) -> None:
        stale = self._of.get(by)
        if stale is not None:
            stale.discard(key)
            if not stale:
                del self._of[by]
