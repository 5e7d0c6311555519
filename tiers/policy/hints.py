"""Hints: what the serving stack knows about the future, told to the eviction policy.

Whoever knows that a conversation continues, that a tool loop will come back, or that a system
prompt is shared, can say so here; the store's policy reads it at every access. Writers are the
backend (SGLang passes a session id with some calls, see ``session_of``), the admin endpoint
(applications and routers), and the trace replay (``--hints simulated``). One ``Hints`` object
belongs to one store (``TieredStore.hints``); keys are the store's object keys (namespace + page
hash + rank suffix, ``hicache_mooncake.keys``).

What a hint does:

- ``pin(keys, ttl_s)``: hard protection. A pinned page that comes up for eviction is put back as
  if just accessed, until the pin expires (or ``unpin``). At most ``max_pins`` keys are pinned;
  beyond that the oldest pins are released.
- ``open_session(sid, keys)`` / ``attach(sid, keys)`` / ``close_session(sid)``: the pages a session
  touched are ``LIKELY`` to be read again while the session is open and ``UNLIKELY`` once it is
  closed (a page belongs to the session that touched it last). An open session that is not
  touched for ``session_ttl_s`` counts as closed.
- ``mark_shared(keys, ttl_s)``: the pages are ``SHARED`` (a system prompt, a shared document)
  until the TTL, whatever session touches them.

``LIKELY`` / ``UNLIKELY`` / ``SHARED`` are soft: the policy makes the hint state part of the page's
class and learns how often pages of each state really come back, so a hint is worth what it has
proven to be worth (wrong hints cost little; with no hints every page is ``NONE`` and the policy
behaves as it does without the channel).

Memory is bounded: at most ``max_keys`` key -> session entries (oldest forgotten first),
``max_sessions`` sessions, ``max_keys`` shared keys and ``max_pins`` pins.

Thread safety: writers take an internal lock; the readers (``state``, ``pinned``) take none and
only read dicts (atomic under the GIL), so a policy running under the store's lock never waits
for an admin call. Time comes from ``clock`` (``time.monotonic`` by default; the replay passes
its own).
"""

from __future__ import annotations

import enum
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any


class HintState(enum.IntEnum):
    """What a page's hints say; the policy uses the value as part of the page's class."""

    NONE = 0
    LIKELY = 1
    UNLIKELY = 2
    SHARED = 3


_OPEN, _CLOSED, _SHARED = HintState.LIKELY.value, HintState.UNLIKELY.value, HintState.SHARED.value


class Hints:
    """Bounded, thread-safe hint store (module docstring)."""

    def __init__(
        self,
        max_keys: int = 1 << 20,
        max_sessions: int = 1 << 16,
        max_pins: int = 1 << 16,
        session_ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(max_keys, max_sessions, max_pins) < 1 or session_ttl_s <= 0:
            raise ValueError("hint bounds must be >= 1 and session_ttl_s > 0")
        self.max_keys = max_keys
        self.max_sessions = max_sessions
        self.max_pins = max_pins
        self.session_ttl_s = session_ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._owner: OrderedDict[str, str] = OrderedDict()  # key -> session that touched it last
        self._state: dict[str, int] = {}  # session -> _OPEN / _CLOSED
        self._touched: OrderedDict[str, float] = OrderedDict()  # session -> last touch (oldest first)
        self._shared: OrderedDict[str, float] = OrderedDict()  # key -> expiry
        self._pins: OrderedDict[str, float] = OrderedDict()  # key -> expiry
        #: any session or shared hint is known (the policy skips lookups otherwise)
        self.active = False
        #: any pin is held
        self.pinning = False

    # ------------------------------------------------------------------ readers (no lock)
    def state(self, key: str) -> int:
        """The page's ``HintState`` value (``NONE`` when nothing is known)."""
        if key in self._shared:
            return _SHARED
        sid = self._owner.get(key)
        if sid is None:
            return 0
        return self._state.get(sid, 0)

    def pinned(self, key: str) -> bool:
        expiry = self._pins.get(key)
        return expiry is not None and expiry > self.clock()

    # ------------------------------------------------------------------ writers
    def open_session(self, sid: str, keys: Iterable[str] = ()) -> None:
        """``sid`` is open: its pages (``keys`` and any attached later) are likely reused."""
        self._set_session(sid, _OPEN, keys)

    def attach(self, sid: str, keys: Iterable[str]) -> None:
        """``keys`` were touched by session ``sid`` (opened if unknown; a closed one stays closed)."""
        self._set_session(sid, None, keys)

    def close_session(self, sid: str, keys: Iterable[str] = ()) -> None:
        """``sid`` is over: the pages it touched last become unlikely (demoted first)."""
        self._set_session(sid, _CLOSED, keys)

    def mark_shared(self, keys: Iterable[str], ttl_s: float) -> None:
        """``keys`` (e.g. a system prompt's pages) are shared: likely reused until the TTL."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            for key in keys:
                self._shared[key] = now + ttl_s
                self._shared.move_to_end(key)
            while len(self._shared) > self.max_keys:
                self._shared.popitem(last=False)
            self.active = True

    def pin(self, keys: Iterable[str], ttl_s: float) -> None:
        """Protect ``keys`` from eviction for ``ttl_s`` seconds (module docstring)."""
        with self._lock:
            now = self.clock()
            for key in keys:
                self._pins[key] = now + ttl_s
                self._pins.move_to_end(key)
            while len(self._pins) > self.max_pins:
                self._pins.popitem(last=False)
            self._expire(now)
            self.pinning = bool(self._pins)

    def unpin(self, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                self._pins.pop(key, None)
            self.pinning = bool(self._pins)

    def clear(self) -> None:
        with self._lock:
            self._owner.clear()
            self._state.clear()
            self._touched.clear()
            self._shared.clear()
            self._pins.clear()
            self.active = self.pinning = False

    def stats(self) -> dict[str, Any]:
        with self._lock:
            open_n = sum(1 for s in self._state.values() if s == _OPEN)
            return {
                "sessions_open": open_n,
                "sessions_closed": len(self._state) - open_n,
                "keys_attached": len(self._owner),
                "keys_shared": len(self._shared),
                "keys_pinned": len(self._pins),
            }

    # ------------------------------------------------------------------ internals
    def _set_session(self, sid: str, state: int | None, keys: Iterable[str]) -> None:
        if not isinstance(sid, str) or not sid:
            raise ValueError("a session id must be a non-empty string")
        with self._lock:
            now = self.clock()
            if state is None:
                state = self._state.get(sid, _OPEN)
            self._state[sid] = state
            self._touched[sid] = now
            self._touched.move_to_end(sid)
            owner = self._owner
            for key in keys:
                owner[key] = sid
                owner.move_to_end(key)
            while len(owner) > self.max_keys:
                owner.popitem(last=False)
            self._expire(now)
            self.active = True

    def _expire(self, now: float) -> None:
        """Open sessions idle past the TTL close; the oldest sessions beyond the bound are
        forgotten (their pages fall back to ``NONE``); expired shared keys and pins go."""
        touched, state = self._touched, self._state
        limit = now - self.session_ttl_s
        while touched:
            sid, last = next(iter(touched.items()))
            over = len(touched) > self.max_sessions
            if not over and last >= limit:
                break
            del touched[sid]
            if not over and state.get(sid) == _OPEN:
                state[sid] = _CLOSED  # idle past the TTL: closed now, forgotten one TTL later
                touched[sid] = now
            else:
                state.pop(sid, None)  # its pages fall back to NONE
        for table in (self._shared, self._pins):
            while table:
                key, expiry = next(iter(table.items()))
                if expiry > now:
                    break
                table.popitem(last=False)
        self.pinning = bool(self._pins)


class ManualClock:
    """A clock that stands still until told (``clock.now = t``): replays and tests."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def session_of(extra_info: Any) -> str | None:
    """The session id SGLang passes with a call, if any.

    SGLang 0.5.23 passes ``HiCacheStorageExtraInfo(prefix_keys=...)`` on its HiCache storage path
    (no per-request field beyond the prefix), and ``HiCacheStorageExtraInfo(extra_info={"session_id":
    req.session_id})`` on ``batch_set_v2`` from the unified radix cache's external-linker offload
    (a request of an SGLang streaming session). This returns that id, or None.
    """
    inner = getattr(extra_info, "extra_info", None)
    if isinstance(inner, dict):
        sid = inner.get("session_id")
        if isinstance(sid, str) and sid:
            return sid
    return None
