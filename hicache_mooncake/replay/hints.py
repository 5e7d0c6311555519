"""Simulated hints: what a hint of a given quality is worth (``replay --hints simulated``).

The hint is the bit a serving stack could know about a request: *this conversation continues*,
i.e. a later request extends this one. It is derived from the trace's own future:

- ``known``: how many leading blocks of the request some earlier request already had (its shared
  prompt and, for a later turn, the conversation so far);
- the request *continues* when its first new block (``hash_ids[known]``; the last block for a
  request with nothing new) is accessed again within ``horizon x capacity`` block accesses after
  the request (a later request extends what this one added).

The reported bit has errors: a true bit is reported with probability ``recall``, a false one with
probability ``fpr`` (seeded, so a replay is repeatable). Per request the replay opens a session
for the request's pages when the bit is reported (``Hints.open_session``) and closes it otherwise
(``Hints.close_session``): the channel an application or router would use through the admin API.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from hicache_mooncake.tiers.policy.hints import Hints, ManualClock

from .reference import _NEVER


def continuation_bits(
    blocks: Sequence[Sequence[int]], nxt: Sequence[Sequence[int]], horizon_blocks: int
) -> list[bool]:
    """Per request: does a later request extend it within ``horizon_blocks`` accesses?"""
    seen: set[int] = set()
    start = [0] * (len(blocks) + 1)
    for i, req in enumerate(blocks):
        start[i + 1] = start[i] + len(req)
    out = []
    for i, req in enumerate(blocks):
        if not req:
            out.append(False)
            continue
        known = 0
        for b in req:
            if b in seen:
                known += 1
            else:
                break
        j = known if known < len(req) else len(req) - 1
        nu = nxt[i][j]
        out.append(nu != _NEVER and start[nu] - start[i + 1] <= horizon_blocks)
        seen.update(req)
    return out


def with_errors(bits: Sequence[bool], recall: float, fpr: float, seed: int = 0) -> list[bool]:
    """The bits a hint source with this ``recall`` and false-positive rate reports."""
    if not 0.0 <= recall <= 1.0 or not 0.0 <= fpr <= 1.0:
        raise ValueError(f"hint recall and fpr must be in [0, 1], got {recall}, {fpr}")
    rng = random.Random(seed)
    return [rng.random() < (recall if b else fpr) for b in bits]


def replay_hints() -> Hints:
    """The ``Hints`` a replay uses: its clock is the request index (sessions never time out
    within a replay; bounds large enough for the public trace)."""
    return Hints(max_keys=1 << 22, max_sessions=1 << 20, session_ttl_s=float("inf"), clock=ManualClock())


@dataclass
class SimulatedHints:
    """Applies one reported bit per request to a store's ``Hints`` (``drive(before=...)``)."""

    reported: list[bool]
    truth: list[bool]
    hints: Hints | None = None

    def __call__(self, index: int, keys: list[str]) -> None:
        if self.hints is not None:
            apply_hint(self.hints, index, keys, self.reported[index])

    def summary(self) -> dict[str, float]:
        pos = sum(self.truth)
        tp = sum(1 for r, t in zip(self.reported, self.truth, strict=True) if r and t)
        fp = sum(1 for r, t in zip(self.reported, self.truth, strict=True) if r and not t)
        neg = len(self.truth) - pos
        return {
            "requests": len(self.truth),
            "continuing": pos,
            "reported": sum(self.reported),
            "measured_recall": tp / pos if pos else 0.0,
            "measured_fpr": fp / neg if neg else 0.0,
        }


def apply_hint(hints: Hints, index: int, keys: list[str], continues: bool) -> None:
    """Request ``index`` is one session: open (it continues) or closed, with its pages."""
    clock = hints.clock
    if isinstance(clock, ManualClock):
        clock.now = float(index)
    sid = f"r{index}"
    if continues:
        hints.open_session(sid, keys)
    else:
        hints.close_session(sid, keys)
