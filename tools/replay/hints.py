"""Simulated hints: what a hint of a given quality is worth (``replay --hints simulated``).

The replay plays an application that talks to the hint channel the way a chat front end or a
router would (``tiers.policy.hints.Hints``): it knows its conversations, whether a conversation
goes on, and which prefixes are shared prompts. All three are read from the trace:

- ``known``: how many leading blocks of a request some earlier request already had;
- **shared prefix**: blocks at which two or more requests branch (several requests' known
  prefixes end there: a system prompt or a shared document). The replay marks them shared
  (``Hints.mark_shared``), as an application knows its own prompts;
- **conversation**: a request whose known prefix ends at a block that only one request branched
  from continues the conversation of the request that wrote that block; otherwise it starts one;
- **the bit** (with errors): the request *continues* when its first new block (``hash_ids[known]``;
  its last block when nothing is new) is accessed again within ``horizon x capacity`` block
  accesses after the request. A true bit is reported with probability ``recall``, a false one
  with probability ``fpr`` (seeded, repeatable).

Per request, before its calls: the pages past its shared prefix are attached to its conversation's
session, which is opened when the reported bit says the conversation continues and closed
otherwise (its pages are then demoted). Clock: the request index.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from hicache_mooncake.tiers.policy.hints import Hints, ManualClock

from .reference import _NEVER


@dataclass
class TraceHints:
    """What the simulated application knows about each request (module docstring)."""

    truth: list[bool]
    conversation: list[int]
    shared: list[int]
    """Leading blocks of each request that are a shared prefix."""


def trace_hints(
    blocks: Sequence[Sequence[int]], nxt: Sequence[Sequence[int]], horizon_blocks: int
) -> TraceHints:
    n = len(blocks)
    start = [0] * (n + 1)
    for i, req in enumerate(blocks):
        start[i + 1] = start[i] + len(req)
    seen: set[int] = set()
    known_of = [0] * n
    writer: dict[int, int] = {}  # block -> the request that first had it
    branches: Counter[int] = Counter()  # block -> requests whose known prefix ends there
    truth = [False] * n
    for i, req in enumerate(blocks):
        known = 0
        for b in req:
            if b not in seen:
                break
            known += 1
        known_of[i] = known
        if known:
            branches[req[known - 1]] += 1
        for b in req[known:]:
            writer.setdefault(b, i)
        seen.update(req)
        if req:
            j = known if known < len(req) else len(req) - 1
            nu = nxt[i][j]
            truth[i] = nu != _NEVER and start[nu] - start[i + 1] <= horizon_blocks
    conversation = list(range(n))
    shared = [0] * n
    for i, req in enumerate(blocks):
        known = known_of[i]
        for p in range(known, 0, -1):  # the deepest branch point in the request's prefix
            if branches[req[p - 1]] >= 2:
                shared[i] = p
                break
        if known and branches[req[known - 1]] < 2:
            conversation[i] = conversation[writer.get(req[known - 1], i)]
    return TraceHints(truth, conversation, shared)


def continuation_bits(
    blocks: Sequence[Sequence[int]], nxt: Sequence[Sequence[int]], horizon_blocks: int
) -> list[bool]:
    """Per request: does a later request extend it within ``horizon_blocks`` accesses?"""
    return trace_hints(blocks, nxt, horizon_blocks).truth


def with_errors(bits: Sequence[bool], recall: float, fpr: float, seed: int = 0) -> list[bool]:
    """The bits a hint source with this ``recall`` and false-positive rate reports."""
    if not 0.0 <= recall <= 1.0 or not 0.0 <= fpr <= 1.0:
        raise ValueError(f"hint recall and fpr must be in [0, 1], got {recall}, {fpr}")
    rng = random.Random(seed)
    return [rng.random() < (recall if b else fpr) for b in bits]


def replay_hints() -> Hints:
    """The ``Hints`` a replay uses: its clock is the request index (sessions and shared marks
    never time out within a replay; bounds large enough for the public trace)."""
    return Hints(max_keys=1 << 22, max_sessions=1 << 20, session_ttl_s=float("inf"), clock=ManualClock())


@dataclass
class SimulatedHints:
    """Applies each request's hints to a store's ``Hints`` (``drive(before=...)``)."""

    trace: TraceHints
    reported: list[bool]
    hints: Hints | None = None
    calls: list[tuple[int, list[str], int, int, bool]] = field(default_factory=list)

    def __call__(self, index: int, keys: list[str]) -> None:
        if self.hints is not None:
            t = self.trace
            apply_hint(self.hints, index, keys, t.shared[index], t.conversation[index], self.reported[index])

    def summary(self) -> dict[str, float]:
        truth = self.trace.truth
        pos = sum(truth)
        tp = sum(1 for r, t in zip(self.reported, truth, strict=True) if r and t)
        fp = sum(1 for r, t in zip(self.reported, truth, strict=True) if r and not t)
        neg = len(truth) - pos
        return {
            "requests": len(truth),
            "continuing": pos,
            "reported": sum(self.reported),
            "measured_recall": tp / pos if pos else 0.0,
            "measured_fpr": fp / neg if neg else 0.0,
            "conversations": len(set(self.trace.conversation)),
            "requests_with_shared_prefix": sum(1 for s in self.trace.shared if s),
        }


def apply_hint(
    hints: Hints, index: int, keys: list[str], shared: int, conversation: int, continues: bool
) -> None:
    """Request ``index``: its shared prefix is marked shared, the rest joins its conversation's
    session, opened (it continues) or closed."""
    clock = hints.clock
    if isinstance(clock, ManualClock):
        clock.now = float(index)
    if shared:
        hints.mark_shared(keys[:shared], float("inf"))
    sid = f"c{conversation}"
    if continues:
        hints.open_session(sid, keys[shared:])
    else:
        hints.close_session(sid, keys[shared:])
