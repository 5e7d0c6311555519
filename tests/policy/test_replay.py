"""Generator shapes, sim/store agreement, the CLI, and (integration) the public-trace targets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hicache_mooncake.cli import main
from hicache_mooncake.tiers.policy import AccessContext
from hicache_mooncake.tools.replay.reference import (
    capacity_blocks,
    infinite_hit_rate,
    lru_hit_rate,
    lru_hits,
    opt_hit_rate,
    unique_blocks,
)
from hicache_mooncake.tools.replay.run import DEFAULT_POLICY, HintOptions, Replay
from hicache_mooncake.tools.replay.sim import ReplayStore, SimTieredStore, drive
from hicache_mooncake.tools.replay.tiered import TieredReplayStore
from hicache_mooncake.tools.replay.trace import SHAPES, generate_trace, load_trace, write_trace

PUBLIC = Path(
    os.environ.get(
        "HICACHE_PUBLIC_TRACE",
        Path(__file__).resolve().parents[3] / "shared" / "traces" / "conversation_trace.jsonl",
    )
)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_generator_shapes(shape: str, tmp_path: Path) -> None:
    reqs = generate_trace(shape, seed=1)
    assert len(reqs) > 500
    assert all(a.timestamp <= b.timestamp for a, b in zip(reqs, reqs[1:], strict=False))
    blocks = [r.hash_ids for r in reqs]
    # Shared prefixes exist, and some requests are continued (their blocks come back).
    assert 0.05 < infinite_hit_rate(blocks) < 0.95
    assert all(len(r.hash_ids) == -(-r.input_length // 512) for r in reqs)
    path = tmp_path / "t.jsonl"
    write_trace(path, reqs)
    assert [r.hash_ids for r in load_trace(path)] == blocks
    assert generate_trace(shape, seed=1) == reqs  # deterministic


def test_bad_trace_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"hash_ids": [1, 2]}\n{"hash_ids": "x"}\n')
    with pytest.raises(ValueError, match="line 2"):
        load_trace(path)


@pytest.mark.parametrize("policy", ["lru", "chain", "reuse", "s3fifo", "tinylfu"])
def test_sim_and_real_tiered_store_agree(policy: str) -> None:
    """--mode store runs the real TieredStore (DramTier + SsdTier on real files, byte-checked)."""
    blocks = [r.hash_ids for r in generate_trace("chat", seed=2)][:2000]
    cap = capacity_blocks(blocks, 0.05)
    sim = SimTieredStore.build(policy, cap, 0.25, 4096)
    store = TieredReplayStore(policy, cap, 0.25, 4096)
    try:
        assert isinstance(store, ReplayStore)
        a, b = drive(blocks, sim), drive(blocks, store)
        st = store.replay_stats()
        assert a.hits == b.hits
        assert st["wrong_bytes"] == 0 and st["lost_to_reclaim"] == 0
        # the DRAM/SSD split may differ by pages whose move was still queued when read
        assert abs(st["dram_hits"] - sim.replay_stats()["dram_hits"]) <= 0.02 * a.hits
        # byte and eviction counters mean the same in both modes (issue 14): a demoted page whose
        # SSD copy survived its promotion is not written again, evictions count by placed tier
        ref = sim.replay_stats()
        for name in ("promotions", "demotions", "ssd_writes", "dram_evictions", "ssd_evictions"):
            assert abs(st[name] - ref[name]) <= 0.02 * max(ref[name], 100) + 16, (name, st[name], ref[name])
        assert ref["ssd_writes"] < ref["demotions"] or ref["promotions"] == 0
    finally:
        store.close()


def test_two_tier_total_hits_equal_single_tier() -> None:
    blocks = [r.hash_ids for r in generate_trace("agent", seed=5)][:1500]
    cap = capacity_blocks(blocks, 0.05)
    one = drive(blocks, SimTieredStore.build(DEFAULT_POLICY, cap, 1.0)).hits
    for df in (0.0, 0.1, 0.25, 0.5):
        store = SimTieredStore.build(DEFAULT_POLICY, cap, df)
        assert drive(blocks, store).hits == one
        st = store.replay_stats()
        # a demoted page is written to SSD unless its copy there survived a promotion
        assert st["ssd_writes"] <= st["demotions"] if df > 0 else st["demotions"] == 0
        assert store.placement.dram_len <= store.dram_blocks


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_default_policy_not_below_lru_on_generated(shape: str) -> None:
    blocks = [r.hash_ids for r in generate_trace(shape, seed=3)]
    for f in (0.05, 0.10):
        cap = capacity_blocks(blocks, f)
        hit = drive(blocks, SimTieredStore.build(DEFAULT_POLICY, cap, 1.0)).hit_rate
        lru = lru_hit_rate(blocks, cap)
        assert opt_hit_rate(blocks, cap) >= lru
        assert hit >= lru - 0.01, (shape, f, hit, lru)


def test_cli_writes_json_and_png(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace, generate_trace("shared_prompt", seed=4)[:600])
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    rc = main(["replay", str(trace), "--json", str(out_json), "--plot", str(out_png), "--no-progress"])
    assert rc == 0
    data = json.loads(out_json.read_text())
    for key in (
        "trace",
        "requests",
        "unique_blocks",
        "capacity_blocks",
        "policy",
        "hit_rate",
        "lru_hit_rate",
        "opt_hit_rate",
        "dram_hits",
        "ssd_hits",
        "dram_hit_share",
        "bytes",
    ):
        assert key in data
    assert data["requests"] == 600 and 0 <= data["hit_rate"] <= data["opt_hit_rate"] + 1e-12
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the policy's cost on the data path, measured in the same run as LRU's (no timed assertion)
    assert data["policy_us_per_access"] > 0 and data["lru_us_per_access"] > 0
    assert data["prefix_keys"] is True and data["hints"] is None
    assert main(["replay", str(trace), "--policy", "nope", "--no-progress"]) == 2


def test_cli_replays_without_prefix_keys_and_with_simulated_hints(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace, generate_trace("chat", seed=4)[:800])
    out = tmp_path / "r.json"
    argv = ["replay", str(trace), "--json", str(out), "--no-progress", "--no-timing", "--no-prefix-keys"]
    assert main([*argv, "--hints", "simulated", "--hint-recall", "0.8", "--hint-fpr", "0.2"]) == 0
    data = json.loads(out.read_text())
    assert data["prefix_keys"] is False and "policy_us_per_access" not in data
    assert data["hints"]["recall"] == 0.8 and data["hints"]["fpr"] == 0.2
    assert 0 < data["hints"]["reported"] < data["requests"]
    assert main([*argv, "--hints", "simulated", "--hint-recall", "2"]) == 2


def test_replay_without_prefix_keys() -> None:
    """SGLang without ``hicache_storage_pass_prefix_keys`` sets each call's pages with no prefix
    (``--no-prefix-keys``): the policy then sees every set as a chain head; it stays above LRU
    and near its figure with prefix keys (the presets pass them)."""
    blocks = [r.hash_ids for r in generate_trace("agent", seed=6)]
    cap = capacity_blocks(blocks, 0.05)
    with_prefix = drive(blocks, SimTieredStore.build(DEFAULT_POLICY, cap, 1.0)).hits
    seen: list[AccessContext] = []
    store = SimTieredStore.build(DEFAULT_POLICY, cap, 1.0)
    on_set = store.policy.on_set
    store.policy.on_set = lambda key, ctx: seen.append(ctx) or on_set(key, ctx)  # type: ignore[method-assign]
    without = drive(blocks, store, prefix_keys=False).hits
    assert all(c.prefix_hits == 0 for c in seen) and any(c.position == 0 and c.prev_key is None for c in seen)
    assert lru_hits(blocks, cap) < without and without >= 0.95 * with_prefix


@pytest.mark.integration
@pytest.mark.skipif(not PUBLIC.exists(), reason=f"public trace not found at {PUBLIC}")
def test_public_trace_references_match_issue() -> None:
    r = _public()
    cap = r.capacity(0.05)
    assert round(lru_hit_rate(r.blocks, cap), 3) == 0.195
    assert round(opt_hit_rate(r.blocks, cap, r.nxt), 3) == 0.366


@pytest.mark.integration
@pytest.mark.skipif(not PUBLIC.exists(), reason=f"public trace not found at {PUBLIC}")
@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.10, 0.20])
def test_public_trace_targets(fraction: float) -> None:
    # One policy owns the total capacity, so the DRAM share does not change total hits
    # (test_two_tier_total_hits_equal_single_tier); the default split is checked here.
    res = _public_run(fraction, "sim")
    assert res["hit_rate"] >= res["lru_hit_rate"], res
    if fraction in (0.05, 0.10):
        gap = res["opt_hit_rate"] - res["lru_hit_rate"]
        # Measured (reuse): 0.162 of the gap at 0.05, 0.182 at 0.10 (issue 5 target: 0.15).
        assert res["hit_rate"] >= res["lru_hit_rate"] + 0.15 * gap, res["gap_fraction"]


@pytest.mark.integration
@pytest.mark.skipif(not PUBLIC.exists(), reason=f"public trace not found at {PUBLIC}")
@pytest.mark.parametrize("fraction", [0.05, 0.10])
def test_public_trace_simulated_hints_reach_half_the_gap(fraction: float) -> None:
    # A "this conversation continues" bit with 10% errors either way (issue 14 target: 0.5).
    res = _public().run(DEFAULT_POLICY, fraction, hints=HintOptions(recall=0.9, fpr=0.1))
    gap = res["opt_hit_rate"] - res["lru_hit_rate"]
    assert res["hit_rate"] >= res["lru_hit_rate"] + 0.5 * gap, res["gap_fraction"]


@pytest.mark.integration
@pytest.mark.skipif(not PUBLIC.exists(), reason=f"public trace not found at {PUBLIC}")
def test_public_trace_without_prefix_keys_stays_above_lru() -> None:
    res = _public().run(DEFAULT_POLICY, 0.05, prefix_keys=False)
    assert res["hit_rate"] > res["lru_hit_rate"], res


@pytest.mark.integration
@pytest.mark.skipif(not PUBLIC.exists(), reason=f"public trace not found at {PUBLIC}")
def test_public_trace_sim_and_store_agree() -> None:
    """The first 4,000 requests of the public trace (a third of it, 30 s less in CI): the real
    store, byte-checked, hits exactly where the simulation does."""
    full = _public()
    assert full.full_blocks is not None
    blocks = full.blocks[:4000]
    head = Replay(full.path, blocks, unique_blocks(blocks), full_blocks=full.full_blocks[:4000])
    sim = head.run(DEFAULT_POLICY, 0.02, dram_fraction=0.25, mode="sim")
    store = head.run(DEFAULT_POLICY, 0.02, dram_fraction=0.25, mode="store")
    assert store["hits"] == sim["hits"] > 0
    assert store["counters"]["wrong_bytes"] == 0


_PUBLIC_REPLAY: list[Replay] = []
_PUBLIC_RUNS: dict[tuple[float, str], dict[str, Any]] = {}


def _public_run(fraction: float, mode: str) -> dict[str, Any]:
    # One run per capacity and mode for the whole session (the public replay is the slow part).
    key = (fraction, mode)
    if key not in _PUBLIC_RUNS:
        _PUBLIC_RUNS[key] = _public().run(DEFAULT_POLICY, fraction, dram_fraction=0.25, mode=mode)
    return _PUBLIC_RUNS[key]


def _public() -> Replay:
    if not _PUBLIC_REPLAY:
        _PUBLIC_REPLAY.append(Replay.load(PUBLIC))
    return _PUBLIC_REPLAY[0]


def test_replay_default_is_the_policy_configs_default_yaml_ships() -> None:
    from hicache_mooncake.presets import load_preset
    from hicache_mooncake.tools.replay.run import configured_default_policy

    assert configured_default_policy() == load_preset("default")["tiers"]["policy"] == DEFAULT_POLICY


def test_replay_with_sidecars_reports_the_restorable_prefix(tmp_path: Path) -> None:
    """``replay --sidecars mamba``: one state per request end next to the KV blocks; the restorable
    prefix (KV hit run whose end page has its state) is reported, with type awareness on and off,
    and never above the KV hits; ``--sidecars`` outside sim mode is a usage error (exit 2)."""
    import json
    import subprocess
    import sys

    trace = tmp_path / "chat.jsonl"
    write_trace(trace, generate_trace("chat", seed=2)[:1500])
    found = {}
    for flag in ([], ["--no-type-aware"]):
        out = tmp_path / f"sc{len(flag)}.json"
        cmd = [sys.executable, "-m", "hicache_mooncake", "replay", str(trace), "--sidecars", "mamba"]
        proc = subprocess.run([*cmd, *flag, "--json", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        data = json.loads(out.read_text())
        side = data["sidecars"]
        assert side["kind"] == "mamba" and side["type_aware"] is (not flag)
        assert side["state_sets"] == 1500 and 0 < side["state_hits"] <= side["state_sets"]
        assert 0 < side["restorable_rate"] < 1
        found[bool(flag)] = side["restorable"]
    assert found[True] > 0 and found[False] > 0  # both ran and restored something
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "hicache_mooncake",
            "replay",
            str(trace),
            "--sidecars",
            "mamba",
            "--mode",
            "store",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--sidecars" in bad.stderr
