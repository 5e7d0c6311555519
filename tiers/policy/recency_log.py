"""One access order, two windows: the reuse policy's open observations and its LRU shadow.

Both follow every access of a key to the end of one recency order: the *observations* are the
``limit`` most recently accessed distinct keys (each with the value of its latest access), the
*shadow* the ``shadow_size`` most recent ones (what an LRU cache of that many keys holds after the
same accesses). Kept as two ``OrderedDict``s they cost two linked nodes and two dict slots per
key (~215 bytes); here the native :class:`~hicache_mooncake.native.FpTable` maps a key's
fingerprint to ``(tick << payload_bits) | payload`` (one native call per probe: ``value``,
``swap``, ``pop_if``; the table grows one bounded segment at a time) and one append-only log
(fingerprints and ticks in two 64-bit ``array``s) holds the order. Nothing per key or access is a
Python object: an observed key costs its table share (21-43 bytes) and its log entry (16), where
a ``dict[int, int]`` as the table cost ~125 (its int keys and values included); a stale log entry
costs 16, and the garbage collector has nothing to visit (a list of fingerprints held an int
object per access, which every full collection walked, the GIL held). The reuse policy observes
up to ``horizon`` (4) capacities of keys, so this is most of what it costs per stored page once
the cache has turned over.

- A log entry is *live* while the table still holds that tick for its fingerprint; a later access
  of the key leaves a stale entry behind. The log is compacted (stale entries dropped) once it
  is more than twice the live keys plus 4096, so it stays O(live keys) whatever the traffic.
  Compaction is a *pass* spread over many accesses: every ``_PASS_EVERY`` accesses it copies the
  live entries of the next ``_PASS_WINDOW`` into a new log (one vectorised lookup), while the
  old log keeps serving; when it reaches the end it takes the entries logged meanwhile and
  becomes the log, head and shadow boundary found again by their ticks (ticks increase along
  the log, and a copy keeps the order). One compaction of millions of entries at once stalled
  the policy's caller for about a second per million (re-read traffic compacts often).
- The shadow is a suffix of the order: a key is in it iff its tick is at or after the shadow's
  boundary entry. Admitting a key that was outside moves the boundary past the oldest live entry
  when the shadow is over size; the boundary only moves forward (a key that left the shadow is
  back only when accessed again), as an LRU cache's contents do.
- Expiring the oldest observation moves the head; the shadow never reaches behind it. Callers
  keep ``limit`` above ``shadow_size`` (the shadow is then exactly the LRU cache's contents);
  with a smaller ``limit`` the shadow is cut to the observations.

Keys are stored as their fingerprint (``hash(key)``: cached in the string, 64 bits, taken as
unsigned, 0 read as 1), so a key that is no longer resident anywhere does not keep its string
alive here. Two keys with one fingerprint share an observation (a reuse estimate's noise, at odds
of about n^2 / 2^64).
Ticks must strictly increase from one ``touch`` to the next. Not thread-safe (callers lock).
"""

from __future__ import annotations

from array import array

import numpy as np

from hicache_mooncake.native import FpTable

_COMPACT_SLACK = 4096
_PASS_WINDOW = 16384  # entries a compaction pass copies per step (a few ms)
_PASS_EVERY = 128  # accesses between two steps of a pass
_PAST_THE_END = 1 << 63  # the boundary's tick when no entry lies at or after it
_U64 = (1 << 64) - 1


def _fp(key_hash: int) -> int:
    """The table's key for a ``hash()`` (any int64): its unsigned bits, 0 read as 1 (the native
    table keeps 0 for empty slots)."""
    return key_hash & _U64 or 1


def _first_at(ticks: np.ndarray, tick: int) -> int:
    """Index of the first of ``ticks`` (increasing) at or after ``tick`` (``_PAST_THE_END``, which
    int64 cannot hold: the end)."""
    return len(ticks) if tick == _PAST_THE_END else int(np.searchsorted(ticks, tick))


class _Pass:
    """A compaction under way: the live entries of the old log's ``[head, end)`` copied so far
    (up to ``at``) into ``fps`` / ``ticks``."""

    __slots__ = ("fps", "ticks", "at", "end", "wait")

    def __init__(self, at: int, end: int) -> None:
        self.fps = array("Q")
        self.ticks = array("q")
        self.at = at
        self.end = end
        self.wait = 0  # accesses until the next step


class RecencyLog:
    """Open observations and an LRU shadow over one access order (module docstring)."""

    def __init__(self, payload_bits: int) -> None:
        self._bits = payload_bits
        self._last = FpTable(1)  # fingerprint -> (tick << bits) | payload of its latest access
        self._fps = array("Q")  # fingerprint of each logged access, oldest first
        self._ticks = array("q")  # its tick
        self._head = 0  # entries before it are expired or stale
        self._bound = 0  # the shadow: live entries at or after this index ...
        self._bound_tick = _PAST_THE_END  # ... are those whose tick is at least this one's
        self._shadow = 0  # live entries at or after ``_bound``
        self._compact_at = _COMPACT_SLACK  # log length at which a compaction is considered
        self._pass: _Pass | None = None  # the compaction under way

    def __len__(self) -> int:
        """Open observations."""
        return len(self._last)

    def __contains__(self, key_hash: int) -> bool:
        return self._last.value(_fp(key_hash)) is not None

    def value(self, key_hash: int) -> int | None:
        """The value of the key's open observation (``(tick << payload_bits) | payload``), or None."""
        return self._last.value(_fp(key_hash))

    @property
    def nbytes(self) -> int:
        """Bytes of the table and the log (what an observed key and a stale entry cost)."""
        arrays = (self._fps, self._ticks) + ((self._pass.fps, self._pass.ticks) if self._pass else ())
        return self._last.nbytes + sum(a.buffer_info()[1] * a.itemsize for a in arrays)

    @property
    def shadow_len(self) -> int:
        return self._shadow

    def touch(
        self,
        key_hash: int,
        tick: int,
        payload: int,
        shadow_size: int,
        limit: int,
        seen_payload: int | None = None,
    ) -> tuple[int | None, bool, int | None]:
        """Record an access of the key of ``key_hash`` at ``tick`` (>= 0, larger than the
        previous one's), with ``seen_payload`` instead of ``payload`` if the key was observed
        (when given).

        Returns the value of its previous access (None if it was not observed), whether it was
        in the shadow before this access, and the value of the oldest observation if this one
        took the open observations over ``limit`` (it is closed: expired), else None. The key
        is in the shadow afterwards; the shadow is then cut to ``shadow_size`` keys (its oldest
        go)."""
        last = self._last
        fp = key_hash & _U64 or 1  # _fp(key_hash), inline: once per access of every page
        stamp = tick << self._bits
        old = last.swap(fp, stamp | payload, None if seen_payload is None else stamp | seen_payload)
        in_shadow = old is not None and old >> self._bits >= self._bound_tick
        fps = self._fps
        fps.append(fp)
        self._ticks.append(tick)
        if self._bound_tick == _PAST_THE_END:  # the boundary was at the end: it is this entry now
            self._bound_tick = tick
        if not in_shadow:
            if self._shadow < shadow_size:
                self._shadow += 1
            else:  # the oldest live entry of the shadow leaves it (usually the one at the boundary)
                i = self._bound
                value = last.value(fps[i])
                if value is None or value >> self._bits != self._ticks[i]:
                    i = self._next_live(i + 1)
                self._move_bound(i + 1)
        expired = self._expire_oldest() if len(last) > limit else None
        if self._pass is not None:
            self._pass.wait -= 1
            if self._pass.wait <= 0:
                self._pass_step()
        elif len(fps) >= self._compact_at:
            if len(fps) - self._head > 2 * len(last) + _COMPACT_SLACK:
                self._pass = _Pass(self._head, len(fps))
                self._pass_step()
            else:
                self._compact_at = len(fps) + len(last) + _COMPACT_SLACK
        return old, in_shadow, expired

    def _expire_oldest(self) -> int:
        """Close the oldest open observation: the first log entry from the head on that the
        table still holds (the stale ones before it are skipped); its value."""
        fps, ticks, pop_if, bits = self._fps, self._ticks, self._last.pop_if, self._bits
        i = self._head
        value = pop_if(fps[i], ticks[i], bits)
        while value is None:  # callers expire only while an observation is open: one is found
            i += 1
            value = pop_if(fps[i], ticks[i], bits)
        self._head = i + 1
        if self._bound <= i:  # the shadow never reaches behind the observations
            self._move_bound(i + 1)
            self._shadow -= 1
        if self._head > _COMPACT_SLACK and 2 * self._head > len(self._fps):
            self._drop_head()
        return value

    def _move_bound(self, i: int) -> None:
        self._bound = i
        self._bound_tick = self._ticks[i] if i < len(self._ticks) else _PAST_THE_END

    def _next_live(self, i: int) -> int:
        """Index of the first live entry at or after ``i`` (one exists: callers only ask while a
        live entry lies there)."""
        fps, ticks, value_of, bits = self._fps, self._ticks, self._last.value, self._bits
        while True:
            value = value_of(fps[i])
            if value is not None and value >> bits == ticks[i]:
                return i
            i += 1

    def _drop_head(self) -> None:
        """Forget the entries before the head (one memmove; what steady expiry needs)."""
        head = self._head
        del self._fps[:head]
        del self._ticks[:head]
        self._head = 0
        self._bound -= head
        self._compact_at -= head
        if (job := self._pass) is not None:  # its range moves with the entries
            job.at = max(job.at - head, 0)
            job.end = max(job.end - head, 0)

    def _pass_step(self) -> None:
        """Copy the live entries of the pass's next window (entries before the head are expired
        or stale: skipped); at the end of its range, finish."""
        job = self._pass
        assert job is not None
        job.wait = _PASS_EVERY
        at = max(job.at, self._head)
        stop = min(at + _PASS_WINDOW, job.end)
        if at < stop:
            fps = np.frombuffer(self._fps, dtype=np.uint64)[at:stop]
            ticks = np.frombuffer(self._ticks, dtype=np.int64)[at:stop]
            found, values = self._last.get(fps)
            live = found & ((values[:, 0] >> np.uint64(self._bits)).astype(np.int64) == ticks)
            job.fps.frombytes(fps[live].tobytes())
            job.ticks.frombytes(ticks[live].tobytes())
            del fps, ticks  # no view of the log may outlive the step (appends resize it)
        job.at = max(stop, at)
        if job.at >= job.end:
            self._pass_finish(job)

    def _pass_finish(self, job: _Pass) -> None:
        """The copy becomes the log: the entries logged since the pass started are appended as
        they are; head and boundary are the first entries whose ticks are at least theirs."""
        end = job.end
        job.fps.frombytes(memoryview(self._fps)[end:].tobytes())
        job.ticks.frombytes(memoryview(self._ticks)[end:].tobytes())
        new_ticks = np.frombuffer(job.ticks, dtype=np.int64)
        head_tick = self._ticks[self._head] if self._head < len(self._ticks) else _PAST_THE_END
        self._head = _first_at(new_ticks, head_tick)
        self._bound = _first_at(new_ticks, self._bound_tick)
        del new_ticks  # no view of the log may outlive the call (appends resize it)
        self._fps, self._ticks = job.fps, job.ticks
        self._pass = None
        self._compact_at = len(self._fps) + len(self._last) + _COMPACT_SLACK
