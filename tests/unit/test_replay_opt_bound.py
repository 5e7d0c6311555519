"""``replay``'s OPT is an upper bound: no policy can reach more hits on a prefix-closed trace
(Mooncake's ``hash_ids`` hash the whole prefix), so "policy 0.20 vs OPT 0.00" cannot be printed
again. OPT is checked against an exhaustive search of every eviction choice on small traces, and
against every shipped policy on a generated one; a trace line without ``hash_ids`` is a usage error
naming the field, not a KeyError."""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from hicache_mooncake.cli import main
from hicache_mooncake.tiers.policy import policy_names
from hicache_mooncake.tools.replay.reference import is_prefix_closed, lru_hits, opt_hits
from hicache_mooncake.tools.replay.run import Replay
from hicache_mooncake.tools.replay.trace import TraceShape, generate_trace, write_trace

# A toy trace of the kind: the first request's last block is no use without its first.
TOY = [[1, 2, 3], [1, 2, 3], [1, 2], [4], [1]]


def best_possible(reqs: Sequence[Sequence[int]], capacity: int) -> int:
    """The most hits any eviction choice reaches under the replay rule (exhaustive search)."""
    accesses = [(i, b) for i, r in enumerate(reqs) for b in r]

    @functools.cache
    def go(k: int, cache: frozenset[int]) -> int:
        if k == len(accesses):
            return 0
        i, b = accesses[k]
        gain = 0
        if k == 0 or accesses[k - 1][0] != i:  # a request starts: its leading cached run hits
            for x in reqs[i]:
                if x not in cache:
                    break
                gain += 1
        held = cache | {b}
        if len(held) <= capacity:
            return gain + go(k + 1, held)
        return gain + max(go(k + 1, held - {v}) for v in held)

    return go(0, frozenset())


def tree_trace(rng: random.Random) -> list[tuple[int, ...]]:
    """Requests that are root-to-node paths of a random forest (prefix-closed, like hash_ids)."""
    nodes = rng.randint(2, 8)
    parent = {x: (rng.randrange(x) if x and rng.random() < 0.8 else None) for x in range(nodes)}

    def path(x: int | None) -> tuple[int, ...]:
        out: list[int] = []
        while x is not None:
            out.append(x)
            x = parent[x]
        return tuple(reversed(out))

    return [path(rng.randrange(nodes)) for _ in range(rng.randint(2, 7))]


def test_opt_is_the_best_possible_on_small_prefix_closed_traces() -> None:
    rng = random.Random(46)
    for _ in range(150):
        reqs = tree_trace(rng)
        assert is_prefix_closed(reqs)
        for cap in (1, 2, 3):
            assert opt_hits(reqs, cap) == best_possible(reqs, cap), (reqs, cap)
    assert opt_hits(TOY, 1) == best_possible(TOY, 1) == 3  # furthest-next-use alone found 1
    assert opt_hits(TOY, 1) >= lru_hits(TOY, 1)


def test_no_policy_beats_opt_on_the_toy_and_a_generated_trace(tmp_path: Path) -> None:
    toy = tmp_path / "toy.jsonl"
    toy.write_text("".join(json.dumps({"hash_ids": r}) + "\n" for r in TOY))
    small = tmp_path / "chat.jsonl"
    write_trace(small, generate_trace(TraceShape(conversations=60, system_prompts=3), seed=3))
    for path in (toy, small):
        replay = Replay.load(path)
        assert replay.opt_is_bound
        for policy in policy_names():
            for fraction in (0.05, 0.2, 0.5):
                r = replay.run(policy, fraction)
                assert r["hit_rate"] <= r["opt_hit_rate"] + 1e-12, (path.name, policy, fraction, r)
                assert r["lru_hit_rate"] <= r["opt_hit_rate"] + 1e-12


def test_cli_on_the_toy_trace_reports_opt_at_least_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toy = tmp_path / "toy.jsonl"
    toy.write_text("".join(json.dumps({"hash_ids": r}) + "\n" for r in TOY))
    assert main(["replay", str(toy), "--no-timing"]) == 0
    words = capsys.readouterr().out.split()
    policy, opt = float(words[words.index("rate") + 1]), float(words[words.index("OPT") + 1])
    assert policy <= opt and opt == 0.3, words


def test_a_trace_without_hash_ids_is_a_usage_error_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 512}\n')
    assert main(["replay", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "trace line 1: no 'hash_ids' field" in err and "fields: input_length, timestamp" in err, err
