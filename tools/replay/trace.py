"""Mooncake-format traces: loading, writing and a small generator.

A trace is one JSON object per line: ``timestamp`` (ms), ``input_length``, ``output_length`` and
``hash_ids`` (one id per 512-token block; requests that share a prefix share its ids, in order).

The generator builds traces with the structure of prefix-sharing LLM workloads, so that tests and
demos do not need the public trace: a few shared system prompts (Zipf popularity), multi-turn
conversations whose next turn re-sends the whole previous context (its full blocks keep their ids;
the partial last block is re-hashed), and one-off requests that are never continued.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class Request:
    """One trace line."""

    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def parse_request(line: str, lineno: int = 0) -> Request:
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError(f"a JSON object per line expected, got {type(obj).__name__}")
        if "hash_ids" not in obj:
            have = ", ".join(sorted(obj)) or "none"
            raise ValueError(
                f"no 'hash_ids' field (a Mooncake trace gives each request's block ids there; fields: {have})"
            )
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ValueError("hash_ids must be a list of integers")
        return Request(
            timestamp=float(obj.get("timestamp", 0)),
            input_length=int(obj.get("input_length", len(ids) * BLOCK_TOKENS)),
            output_length=int(obj.get("output_length", 0)),
            hash_ids=tuple(ids),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"trace line {lineno}: {exc}") from None


def iter_trace(path: str | Path) -> Iterator[Request]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield parse_request(line, lineno)


def load_trace(path: str | Path) -> list[Request]:
    """Read a whole Mooncake-format trace; raises ``ValueError`` naming the bad line."""
    return list(iter_trace(path))


def write_trace(path: str | Path, requests: Iterable[Request]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in requests:
            obj = {
                "timestamp": int(r.timestamp),
                "input_length": r.input_length,
                "output_length": r.output_length,
                "hash_ids": list(r.hash_ids),
            }
            fh.write(json.dumps(obj) + "\n")


def block_lists(requests: Iterable[Request]) -> list[tuple[int, ...]]:
    return [r.hash_ids for r in requests]


@dataclass
class TraceShape:
    """Knobs of the generator; the presets in ``SHAPES`` are the shapes the tests cover."""

    conversations: int = 2000
    system_prompts: int = 8
    system_prompt_blocks: tuple[int, int] = (1, 4)
    zipf_s: float = 1.1
    continue_prob: float = 0.55  # probability that a conversation gets another turn
    max_turns: int = 12
    first_input_tokens: tuple[int, int] = (300, 8000)
    turn_input_tokens: tuple[int, int] = (50, 2000)
    output_tokens: tuple[int, int] = (20, 800)
    oneoff_fraction: float = 0.3  # conversations that are a single request, never continued
    mean_think_ms: float = 60_000.0  # gap between the answer and the next turn
    arrival_rate_per_s: float = 3.0  # new conversations per second
    extra: dict[str, float] = field(default_factory=dict)


SHAPES: dict[str, TraceShape] = {
    # Many chats under a handful of system prompts: the Mooncake conversation shape.
    "chat": TraceShape(),
    # One big shared system prompt, mostly one-off requests (tool / API traffic).
    "shared_prompt": TraceShape(
        system_prompts=2,
        system_prompt_blocks=(6, 12),
        continue_prob=0.25,
        oneoff_fraction=0.7,
        first_input_tokens=(3500, 9000),
    ),
    # Long agent-like sessions: many turns, short additions, long think times.
    "agent": TraceShape(
        conversations=700,
        continue_prob=0.85,
        max_turns=30,
        turn_input_tokens=(100, 1500),
        oneoff_fraction=0.1,
        mean_think_ms=30_000.0,
        arrival_rate_per_s=1.0,
    ),
}


@dataclass
class _Conv:
    ids: list[int]  # ids of the context's full blocks
    tokens: int
    turn: int
    oneoff: bool


def generate_trace(shape: TraceShape | str = "chat", seed: int = 0) -> list[Request]:
    """Generate a Mooncake-format trace (requests sorted by timestamp)."""
    if isinstance(shape, str):
        try:
            shape = SHAPES[shape]
        except KeyError:
            raise KeyError(f"unknown trace shape {shape!r}; known: {', '.join(sorted(SHAPES))}") from None
    rng = random.Random(seed)
    next_id = 0

    def new_ids(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    prompts: list[tuple[list[int], int]] = []  # (full-block ids, tokens)
    for _ in range(shape.system_prompts):
        nblocks = rng.randint(*shape.system_prompt_blocks)
        prompts.append((new_ids(nblocks), nblocks * BLOCK_TOKENS))
    weights = [1.0 / (i + 1) ** shape.zipf_s for i in range(len(prompts))]

    # Event queue of (time_ms, seq, conversation state).
    events: list[tuple[float, int, _Conv]] = []
    t = 0.0
    for seq in range(shape.conversations):
        t += rng.expovariate(shape.arrival_rate_per_s) * 1000.0
        pid = rng.choices(range(len(prompts)), weights)[0]
        ids, ptokens = prompts[pid]
        heapq.heappush(events, (t, seq, _Conv(list(ids), ptokens, 0, rng.random() < shape.oneoff_fraction)))

    out: list[Request] = []
    seq = shape.conversations
    while events:
        when, _, st = heapq.heappop(events)
        full, tokens, turn = st.ids, st.tokens, st.turn
        span = shape.first_input_tokens if turn == 0 else shape.turn_input_tokens
        tokens += rng.randint(*span)
        nfull = tokens // BLOCK_TOKENS
        full = full + new_ids(nfull - len(full))
        hash_ids = list(full)
        if tokens % BLOCK_TOKENS:
            hash_ids += new_ids(1)  # the partial last block: re-hashed next turn
        output = rng.randint(*shape.output_tokens)
        out.append(
            Request(timestamp=when, input_length=tokens, output_length=output, hash_ids=tuple(hash_ids))
        )
        if not st.oneoff and turn + 1 < shape.max_turns and rng.random() < shape.continue_prob:
            # The answer joins the context; the user thinks, then sends the next turn.
            nxt = _Conv(full, tokens + output, turn + 1, False)
            gap = rng.expovariate(1.0 / shape.mean_think_ms) + output * 20.0
            seq += 1
            heapq.heappush(events, (when + gap, seq, nxt))
    return out
