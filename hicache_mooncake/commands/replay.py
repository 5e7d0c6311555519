"""``hicache-mooncake replay TRACE``: replay a Mooncake trace against a policy, LRU and OPT.

``--json`` is written as soon as the replays are done, before the plot; ``--plot`` needs
matplotlib, checked before any work. A trace without requests, or a line without ``hash_ids``,
is an error naming it (exit status 2). OPT is Belady's furthest-next-use with the deepest block
of a request going first: an upper bound on every policy for a prefix-closed trace (Mooncake's),
a heuristic otherwise (said so). The progress bar (on stderr, only when it is a terminal) counts
the requests of each replay.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.optional_deps import require


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
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (there is none when stderr is not a terminal)",
    )
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
        "--sidecars",
        choices=("none", "mamba"),
        default="none",
        help="mamba: a hybrid model's state object at each request's end (sim mode); reports the "
        "restorable prefix (KV hits up to the last page whose state is cached)",
    )
    parser.add_argument(
        "--state-size",
        type=float,
        default=1.0,
        help="with --sidecars: a state's size in blocks (default 1.0)",
    )
    parser.add_argument(
        "--no-type-aware",
        action="store_true",
        help="with --sidecars: superseded states are not evicted first (tiers.type_aware_eviction: false)",
    )
    parser.add_argument(
        "--no-timing",
        action="store_true",
        help="skip policy_us_per_access / lru_us_per_access (the policy calls replayed alone)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hicache_mooncake.tiers.policy import policy_names
    from hicache_mooncake.tools.replay.run import (
        DEFAULT_BLOCK_BYTES,
        DEFAULT_DRAM_FRACTION,
        SWEEP_FRACTIONS,
        HintOptions,
        Replay,
        SidecarOptions,
        configured_default_policy,
    )

    policy = args.policy or configured_default_policy()
    if policy not in policy_names():
        raise UsageError(f"unknown policy {policy!r}; known policies: {', '.join(policy_names())}")
    dram_fraction = DEFAULT_DRAM_FRACTION if args.dram_fraction is None else args.dram_fraction
    if not 0.0 <= dram_fraction <= 1.0 or args.capacity_fraction <= 0:
        raise UsageError("--dram-fraction must be in [0, 1] and --capacity-fraction > 0")
    if args.plot_out:
        require("matplotlib", needed_for="--plot")
    hints = None
    if args.hints == "simulated":
        if not (0 <= args.hint_recall <= 1 and 0 <= args.hint_fpr <= 1 and args.hint_horizon > 0):
            raise UsageError("--hint-recall and --hint-fpr must be in [0, 1], --hint-horizon > 0")
        hints = HintOptions(args.hint_recall, args.hint_fpr, args.hint_horizon, args.hint_seed)
    prefix_keys = not args.no_prefix_keys
    sidecars = None
    if args.sidecars != "none":
        if args.mode != "sim" or args.state_size <= 0:
            raise UsageError("--sidecars needs --mode sim and --state-size > 0")
        sidecars = SidecarOptions(args.sidecars, args.state_size, not args.no_type_aware)
    try:
        replay = Replay.load(args.trace)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read trace {args.trace}: {exc}") from None
    if not replay.blocks or not any(replay.blocks):
        raise UsageError(f"trace {args.trace} has no requests with blocks (hash_ids): nothing to replay")
    fractions = sorted(set(SWEEP_FRACTIONS) | {args.capacity_fraction}) if args.plot_out else []
    block_bytes = DEFAULT_BLOCK_BYTES if args.block_bytes is None else args.block_bytes
    progress = _Progress(len(replay.blocks), 1 + len(fractions), not args.no_progress and sys.stderr.isatty())
    with progress.replay(f"{policy} at {args.capacity_fraction:g}, {args.mode}") as tick:
        result = replay.run(
            policy,
            args.capacity_fraction,
            dram_fraction,
            args.mode,
            block_bytes,
            tick,
            prefix_keys=prefix_keys,
            hints=hints,
            timing=not args.no_timing,
            sidecars=sidecars,
        )
    if fractions:
        result["sweep"] = replay.sweep(
            policy,
            fractions,
            dram_fraction,
            lambda f: progress.replay(f"sweep: {policy} at {f:g}"),
            prefix_keys=prefix_keys,
            hints=hints,
        )
        result["plot"] = args.plot_out
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(result, indent=2) + "\n")
    print(
        f"{policy}: hit rate {result['hit_rate']:.4f}  LRU {result['lru_hit_rate']:.4f}  "
        f"OPT {result['opt_hit_rate']:.4f}  gap reached {result['gap_fraction']:.1%}  "
        f"DRAM share of hits {result['dram_hit_share']:.1%}  ({result['requests']} requests, "
        f"{result['blocks']} blocks)"
        + (
            f"  policy {result['policy_us_per_access']:.2f} us/access (LRU {result['lru_us_per_access']:.2f})"
            if "policy_us_per_access" in result
            else ""
        )
    )
    if not result["opt_is_upper_bound"]:
        print(
            "note: OPT is not an upper bound here: some block id follows different ids in different "
            "requests (Mooncake's hash_ids hash the whole prefix, so they never do)"
        )
    if "sidecars" in result:
        side = result["sidecars"]
        print(
            f"sidecars {side['kind']} ({side['state_fraction']:g} blocks each, type-aware "
            f"{'on' if side['type_aware'] else 'off'}): restorable {side['restorable_rate']:.4f} "
            f"of blocks, state hits {side['state_hits']}"
        )
    if args.plot_out:
        from hicache_mooncake.tools.replay.plot import plot_sweep

        title = f"{Path(args.trace).name} (DRAM share {dram_fraction:g})"
        plot_sweep(result["sweep"], policy, args.plot_out, title=title)
    return 0


class _Progress:
    """One labelled bar per replay, counting that replay's requests (``k/n`` when several run)."""

    def __init__(self, requests: int, replays: int, enabled: bool) -> None:
        self.requests, self.replays, self.enabled = requests, replays, enabled
        self.started = 0

    @contextmanager
    def replay(self, label: str) -> Iterator[Callable[[int], Any]]:
        from tqdm import tqdm

        self.started += 1
        count = f" {self.started}/{self.replays}" if self.replays > 1 else ""
        bar = tqdm(
            total=self.requests,
            desc=f"replay{count} ({label})",
            unit="req",
            disable=not self.enabled,
            file=sys.stderr,
        )
        try:
            yield bar.update
        finally:
            bar.close()
