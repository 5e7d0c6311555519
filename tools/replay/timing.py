"""What a policy costs on the data path: the exact policy calls a replay made, replayed alone.

``CallRecorder`` sits between the placement and a policy during a replay and logs every call the
placement makes (``on_set``, ``on_hit``, ``pop_victim``, ``on_remove``, ``on_miss``) with its
arguments, and every hint the replay gave in between. ``time_calls`` then makes a fresh policy
of the same name and options and replays the log in a tight loop, timing only the policy calls
(hint writes run between timed segments, as the replay made them). The fresh policy is
deterministic, so it sees the same calls and chooses the same victims as the recorded one.

``us_per_access`` = policy seconds / block accesses of the trace, in microseconds (the median of
``repeats`` timings); the replay reports it for the policy and for LRU side by side.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from hicache_mooncake.tiers.policy import AccessContext, EvictionPolicy, make_policy
from hicache_mooncake.tiers.policy.base import DEFAULT_CONTEXT
from hicache_mooncake.tiers.policy.hints import Hints

from .hints import replay_hints

_SET, _HIT, _POP, _REMOVE, _MISS, _HINT = range(6)
Call = tuple[int, Any, Any]


class CallRecorder(EvictionPolicy):
    """Forwards every call to ``inner`` and logs it (the placement sees ``inner``'s answers)."""

    name = ""

    def __init__(self, inner: EvictionPolicy) -> None:
        self.inner = inner
        self.calls: list[Call] = []

    def use_hints(self, hints: Hints | None) -> None:
        self.inner.use_hints(hints)

    def hint(self, apply: Callable[[Hints], None]) -> None:
        """Log a hint write (``apply(hints)``) made between policy calls."""
        self.calls.append((_HINT, apply, None))

    def on_set(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        self.calls.append((_SET, key, ctx))
        return self.inner.on_set(key, ctx)

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.on_set(key, ctx)

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.calls.append((_HIT, key, ctx))
        self.inner.on_hit(key, ctx)

    def on_remove(self, key: str) -> None:
        self.calls.append((_REMOVE, key, None))
        self.inner.on_remove(key)

    def on_miss(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.calls.append((_MISS, key, ctx))
        self.inner.on_miss(key, ctx)

    def pop_victim(self) -> str | None:
        self.calls.append((_POP, None, None))
        return self.inner.pop_victim()

    def should_admit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.inner.should_admit(key, ctx)

    def __len__(self) -> int:
        return len(self.inner)

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def clear(self) -> None:
        self.inner.clear()


def time_calls(
    calls: list[Call], policy: str, options: dict[str, Any] | None = None, hints: bool = False
) -> float:
    """Seconds a fresh ``policy`` spends in ``calls`` (hint writes excluded)."""
    p = make_policy(policy, **(options or {}))
    h = replay_hints() if hints else None
    p.use_hints(h)
    on_set, on_hit, pop, remove, miss = p.on_set, p.on_hit, p.pop_victim, p.on_remove, p.on_miss
    clock = time.process_time  # CPU time: a loaded machine does not inflate it
    total = 0.0
    start = clock()
    for op, a, b in calls:
        if op == _SET:
            on_set(a, b)
        elif op == _HIT:
            on_hit(a, b)
        elif op == _POP:
            pop()
        elif op == _REMOVE:
            remove(a)
        elif op == _MISS:
            miss(a, b)
        else:
            total += clock() - start
            if h is not None:
                a(h)
            start = clock()
    return total + clock() - start


def us_per_access(
    calls: list[Call],
    policy: str,
    accesses: int,
    options: dict[str, Any] | None = None,
    hints: bool = False,
    repeats: int = 3,
) -> float:
    """Median over ``repeats`` of the policy time per block access, in microseconds."""
    if accesses <= 0:
        return 0.0
    runs = [time_calls(calls, policy, options, hints) for _ in range(max(1, repeats))]
    return 1e6 * statistics.median(runs) / accesses
