"""ReuseLedger: the reuse policy's per-access bookkeeping, a whole batch of accesses per call.

The reuse policy (``tiers/policy/reuse.py``) decides; the ledger (``native/src/hm_reuse.c``)
records. Per access, in the order the policy's Python once did it access by access: the class
(arrival, tail, request length, prefix hits, hint; tables given by the policy), the tick, a new
request's epoch and the guard's paired sums, one ``RecencyLog`` touch with the per-class counters
(reuses, exposure, open observations), the guard's hit counts, the GreedyDual priority and
whether the access joins the current run or opens one (``news``). The resident count and the
observation limit grow as new keys arrive.

Boundary: ``access(keys, ctxs, start, stage, read, in_where, hints, news, resident)`` takes the
keys (str), their ``AccessContext`` tuples (read by field position), per key whether the policy
tracks it already and its hint state (bytes, or None), and appends a tuple per new run to
``news``. It returns ``(index, stage, event)``: DONE (0) with ``index == len(keys)``, or ADAPT
(1: the guard's test is due, before key ``index``'s observation) or REFRESH (2: the class values
are due, before its push); the policy pushes the accesses before ``index``, decides, and calls
again with the returned ``index`` and ``stage``. The per-class arrays (``pos``, ``expo``:
float64; ``open_n``, ``open_sum``: int64) and the class values ``v`` are the policy's numpy
arrays, borrowed for the ledger's lifetime (so they cannot be resized; the policy writes them in
place). Scalars the policy's decisions read or set (``tick``, ``peak``, ``floor``, ``zs``, ...)
are attributes.

Failure semantics: every key and context is checked before any access is recorded (TypeError /
ValueError naming the item, nothing changed). A touch that cannot allocate stops the batch:
MemoryError, ``stopped_at`` names the key, the accesses before it are recorded and in ``news``.
Not thread-safe (the policy runs under its store's lock); the GIL is held except while the
observation table grows (``RecencyLog``'s rule).
"""

from __future__ import annotations

from ._core import ReuseLedger

__all__ = ["ReuseLedger"]
