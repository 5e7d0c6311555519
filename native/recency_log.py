"""RecencyLog: one access order over 64-bit fingerprints, read through two windows.

The *observations* are the ``limit`` most recently accessed distinct keys (each with the value of
its latest access, ``(tick << payload_bits) | payload``), the *shadow* the ``shadow_size`` most
recent ones (what an LRU cache of that many keys holds after the same accesses). The reuse
policy (``tiers/policy/reuse.py``) makes one ``touch`` per access of every page: the whole
bookkeeping of that access is one native call (it was ~25 lines of Python around a native table
call, ~1.06 us of the policy's ~2 us per access).

Structure (``native/src/hm_recency.c``): the native segmented fingerprint table maps each
observed key to its latest access, and an append-only log (two uint64 arrays) holds the order.
A log entry is live while the table still holds its tick; a later access of the key leaves a
stale 16-byte entry. The log is compacted (stale entries dropped) by a pass spread over many
accesses (every ``pass_every`` accesses it copies the live entries of the next ``pass_window``)
once it is more than twice the live keys plus ``compact_slack``; the entries before the head
(expired or stale) are dropped once the head is past half the log. So no access does more than
O(``pass_window``) work and the log stays O(live keys). The shadow is a suffix of the order: a
key is in it iff its tick is at or after the boundary's; the boundary only moves forward.

Contract: ``touch(key_hash, tick, payload, shadow_size, limit, seen_payload=None)`` records an
access (``seen_payload`` instead of ``payload`` when the key was observed) and returns ``(the
previous access's value or None, whether the key was in the shadow before, the value of the
oldest observation closed because this one took the observations over limit, or None)``; the
shadow is then cut to ``shadow_size``. Keys are ``hash(key)`` (any int, taken as its unsigned low
64 bits, 0 read as 1): a key no longer resident keeps no string alive here, and two keys with one
fingerprint share an observation (noise in a reuse estimate, at odds of about n^2 / 2^64).
Ticks strictly increase and stay below ``2 ** (63 - payload_bits)``; payloads are below
``2 ** payload_bits`` (ValueError, nothing changed). Callers keep ``limit`` above
``shadow_size`` (the shadow is then exactly the LRU cache's contents; with a smaller ``limit``
the shadow is cut to the observations). A MemoryError leaves the log as it was. Not
thread-safe: callers serialise (the policy runs under its store's lock). Every call keeps the GIL
(O(1) amortised) except a touch that must grow the table: one segment doubled or split (up to ~7
ms at 2M keys on the project's VM) runs with the GIL released, as FpTable's growth does, and a
call from another thread meanwhile raises RuntimeError instead of touching the table.
"""

from __future__ import annotations

from ._core import RecencyLog

__all__ = ["RecencyLog"]
