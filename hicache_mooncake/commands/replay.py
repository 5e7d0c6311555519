"""``hicache-mooncake replay TRACE``: replay a Mooncake trace against a policy, LRU and OPT."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "replay",
        help="replay a Mooncake-format trace: hit rate of a policy vs LRU and OPT",
        description=__doc__,
    )
    parser.add_argument("trace", help="Mooncake-format JSONL trace (timestamp, input_length, hash_ids)")
    parser.add_argument(
        "--capacity-fraction",
        type=float,
        default=0.05,
        help="total capacity as a fraction of unique blocks (default 0.05)",
    )
    parser.add_argument(
        "--dram-fraction",
        type=float,
        default=None,
        help="share of the capacity held in DRAM, the rest on SSD (default 0.25)",
    )
    parser.add_argument("--policy", default=None, help="policy name (default: the configured default policy)")
    parser.add_argument(
        "--mode",
        choices=("sim", "store"),
        default="sim",
        help="sim: policies only; store: a store with payloads",
    )
    parser.add_argument(
        "--block-bytes", type=int, default=None, help="bytes per block for the bytes-moved counters"
    )
    parser.add_argument("--json", dest="json_out", default=None, help="write the result as JSON here")
    parser.add_argument(
        "--plot", dest="plot_out", default=None, help="write hit rate vs capacity (policy, LRU, OPT) here"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hicache_mooncake.replay.plot import plot_sweep
    from hicache_mooncake.replay.run import (
        DEFAULT_BLOCK_BYTES,
        DEFAULT_DRAM_FRACTION,
        SWEEP_FRACTIONS,
        Replay,
        configured_default_policy,
    )
    from hicache_mooncake.tiers.policy import policy_names

    policy = args.policy or configured_default_policy()
    if policy not in policy_names():
        print(f"unknown policy {policy!r}; known policies: {', '.join(policy_names())}", file=sys.stderr)
        return 2
    dram_fraction = DEFAULT_DRAM_FRACTION if args.dram_fraction is None else args.dram_fraction
    if not 0.0 <= dram_fraction <= 1.0 or args.capacity_fraction <= 0:
        print("--dram-fraction must be in [0, 1] and --capacity-fraction > 0", file=sys.stderr)
        return 2
    try:
        replay = Replay.load(args.trace)
    except (OSError, ValueError) as exc:
        print(f"cannot read trace: {exc}", file=sys.stderr)
        return 2
    fractions = sorted(set(SWEEP_FRACTIONS) | {args.capacity_fraction}) if args.plot_out else []
    total = len(replay.blocks) * (1 + len(fractions))
    with tqdm(total=total, unit="req", disable=args.no_progress, file=sys.stderr) as bar:
        result = replay.run(
            policy,
            args.capacity_fraction,
            dram_fraction,
            args.mode,
            DEFAULT_BLOCK_BYTES if args.block_bytes is None else args.block_bytes,
            progress=bar.update,
        )
        if args.plot_out:
            sweep = replay.sweep(policy, fractions, dram_fraction, progress=bar.update)
            result["sweep"] = sweep
    if args.plot_out:
        plot_sweep(
            result["sweep"], policy, args.plot_out, title=f"{args.trace} (DRAM share {dram_fraction:g})"
        )
        result["plot"] = args.plot_out
    text = json.dumps(result, indent=2)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(
        f"{policy}: hit rate {result['hit_rate']:.4f}  LRU {result['lru_hit_rate']:.4f}  "
        f"OPT {result['opt_hit_rate']:.4f}  gap reached {result['gap_fraction']:.1%}  "
        f"DRAM share of hits {result['dram_hit_share']:.1%}"
    )
    return 0
