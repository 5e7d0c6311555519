"""``hicache-mooncake replay TRACE``: replay a Mooncake trace against a policy, LRU and OPT."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
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
    parser.add_argument(
        "--no-prefix-keys",
        action="store_true",
        help="replay SGLang without hicache_storage_pass_prefix_keys (sets carry no prefix)",
    )
    parser.add_argument(
        "--hints",
        choices=("none", "simulated"),
        default="none",
        help="simulated: hints derived from the trace's future with the error rates below",
    )
    parser.add_argument(
        "--hint-recall", type=float, default=0.9, help="share of continuing requests hinted (default 0.9)"
    )
    parser.add_argument(
        "--hint-fpr", type=float, default=0.1, help="share of other requests wrongly hinted (default 0.1)"
    )
    parser.add_argument(
        "--hint-horizon",
        type=float,
        default=4.0,
        help="a request continues when extended within this many capacities of accesses (default 4)",
    )
    parser.add_argument("--hint-seed", type=int, default=0, help="seed of the hint errors (default 0)")
    parser.add_argument(
        "--no-timing",
        action="store_true",
        help="skip policy_us_per_access / lru_us_per_access (the policy calls replayed alone)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hicache_mooncake.replay.plot import plot_sweep
    from hicache_mooncake.replay.run import (
        DEFAULT_BLOCK_BYTES,
        DEFAULT_DRAM_FRACTION,
        SWEEP_FRACTIONS,
        HintOptions,
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
    hints = None
    if args.hints == "simulated":
        if not (0 <= args.hint_recall <= 1 and 0 <= args.hint_fpr <= 1 and args.hint_horizon > 0):
            print("--hint-recall and --hint-fpr must be in [0, 1], --hint-horizon > 0", file=sys.stderr)
            return 2
        hints = HintOptions(args.hint_recall, args.hint_fpr, args.hint_horizon, args.hint_seed)
    prefix_keys = not args.no_prefix_keys
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
            prefix_keys=prefix_keys,
            hints=hints,
            timing=not args.no_timing,
        )
        if args.plot_out:
            sweep = replay.sweep(
                policy, fractions, dram_fraction, progress=bar.update, prefix_keys=prefix_keys, hints=hints
            )
            result["sweep"] = sweep
    if args.plot_out:
        plot_sweep(
            result["sweep"],
            policy,
            args.plot_out,
            title=f"{Path(args.trace).name} (DRAM share {dram_fraction:g})",
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
        + (
            f"  policy {result['policy_us_per_access']:.2f} us/access (LRU {result['lru_us_per_access']:.2f})"
            if "policy_us_per_access" in result
            else ""
        )
    )
    return 0
