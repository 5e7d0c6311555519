"""The per-family table: a policy's share of the LRU->OPT gap on several trace families.

``python -m hicache_mooncake.tools.replay.families [TRACE ...] [--json OUT]`` replays the policy on the
generated families (``trace.SHAPES`` x ``--seeds``) and on every trace file given (the public
Mooncake traces live outside the repository), at each ``--fractions`` capacity, and reports per
family and capacity the gap fraction ``(hit - LRU) / (OPT - LRU)`` and the hit-rate difference
to LRU. Defaults are chosen by the worst family, so the table lists the worst row too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .reference import capacity_blocks, lru_hit_rate, next_uses, opt_hit_rate, unique_blocks
from .run import DEFAULT_POLICY, HintOptions, Replay
from .sim import SimTieredStore, drive
from .trace import SHAPES, generate_trace

FRACTIONS = (0.02, 0.05, 0.10, 0.20)
SEEDS = (1, 2, 3)


def family_blocks(traces: Sequence[str | Path] = (), seeds: Sequence[int] = SEEDS) -> dict[str, list[Any]]:
    """Family name -> block lists: each trace file (by file name), then each generated shape and seed."""
    out: dict[str, list[Any]] = {}
    for path in traces:
        out[Path(path).name] = Replay.load(path).blocks
    for shape in sorted(SHAPES):
        for seed in seeds:
            out[f"{shape}-{seed}"] = [r.hash_ids for r in generate_trace(shape, seed=seed)]
    return out


def evaluate(
    blocks: list[Any],
    fraction: float,
    policy: str = DEFAULT_POLICY,
    prefix_keys: bool = True,
    hints: HintOptions | None = None,
    **options: Any,
) -> dict[str, float]:
    """One cell: the policy's hit rate next to LRU's and OPT's (sim, one tier)."""
    cap = capacity_blocks(blocks, fraction, unique_blocks(blocks))
    if hints is None:
        hit = drive(
            blocks, SimTieredStore.build(policy, cap, 1.0, **options), prefix_keys=prefix_keys
        ).hit_rate
    else:
        replay = Replay("", blocks, unique_blocks(blocks))
        hit = replay.run(policy, fraction, 1.0, prefix_keys=prefix_keys, hints=hints)["hit_rate"]
    lru = lru_hit_rate(blocks, cap)
    opt = opt_hit_rate(blocks, cap, next_uses(blocks))
    gap = opt - lru
    return {
        "capacity_blocks": cap,
        "hit_rate": hit,
        "lru_hit_rate": lru,
        "opt_hit_rate": opt,
        "gap_fraction": (hit - lru) / gap if gap > 1e-12 else 0.0,
        "vs_lru": hit - lru,
    }


def table(
    families: dict[str, list[Any]],
    fractions: Sequence[float] = FRACTIONS,
    policy: str = DEFAULT_POLICY,
    prefix_keys: bool = True,
    hints: HintOptions | None = None,
    echo: bool = False,
    **options: Any,
) -> dict[str, Any]:
    rows: dict[str, list[dict[str, float]]] = {}
    for name, blocks in families.items():
        rows[name] = [evaluate(blocks, f, policy, prefix_keys, hints, **options) for f in fractions]
        if echo:
            print(format_row(name, rows[name]), flush=True)
    worst = [min(rows[n][i]["gap_fraction"] for n in rows) for i in range(len(fractions))]
    return {
        "policy": policy,
        "options": options,
        "prefix_keys": prefix_keys,
        "hints": None if hints is None else vars(hints),
        "fractions": list(fractions),
        "rows": rows,
        "worst_gap_fraction": worst,
        "never_below_lru": all(c["vs_lru"] >= 0 for r in rows.values() for c in r),
    }


def format_row(name: str, cells: list[dict[str, float]]) -> str:
    return f"{name:26s} " + "  ".join(
        f"{c['gap_fraction']:+.3f} ({100 * c['vs_lru']:+.2f} pt)" for c in cells
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", help="Mooncake-format trace files to add as families")
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    parser.add_argument("--seeds", default=",".join(str(s) for s in SEEDS))
    parser.add_argument("--no-prefix-keys", action="store_true")
    parser.add_argument("--hints", choices=("none", "simulated"), default="none")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",")]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    hints = HintOptions() if args.hints == "simulated" else None
    print(f"{'family':26s} " + "  ".join(f"{100 * f:>5g}% gap (vs LRU)  " for f in fractions))
    out = table(
        family_blocks(args.traces, seeds), fractions, args.policy, not args.no_prefix_keys, hints, echo=True
    )
    print(f"{'worst':26s} " + "  ".join(f"{w:+.3f}              " for w in out["worst_gap_fraction"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0 if out["never_below_lru"] else 1


if __name__ == "__main__":
    sys.exit(main())
