"""``EventsSink``: what a tier tells about its contents (KV events for routers, issue 47).

A tier calls its ``events`` sink when keys become readable in it (``stored``), when they leave it
(``removed``: eviction, demotion, a dropped copy, region reclaim) and when it is emptied
(``cleared``). ``tier`` is the tier's ``name`` (``dram``, ``ssd``, ``remote``); a sink maps it to
a storage medium.

Contract for implementations (the calls come from the data path, some under a tier's lock):
- never block and never wait for I/O or for another thread: append and return (a bounded queue
  that drops and counts when full);
- never raise; never call back into a tier or the store (lock order);
- ``keys`` may be the caller's list: read it during the call, keep it as it is (callers do not
  change it afterwards), never modify it.
A ``stored`` may repeat a key the tier already held (values are immutable, so a repeat says
nothing new); consumers treat events as idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class EventsSink(Protocol):
    def stored(self, tier: str, keys: Sequence[str]) -> None: ...

    def removed(self, tier: str, keys: Sequence[str]) -> None: ...

    def cleared(self, tier: str) -> None: ...


class NullSink:
    """The default sink: nothing is published."""

    def stored(self, tier: str, keys: Sequence[str]) -> None:
        return None

    def removed(self, tier: str, keys: Sequence[str]) -> None:
        return None

    def cleared(self, tier: str) -> None:
        return None


NULL_SINK: EventsSink = NullSink()
