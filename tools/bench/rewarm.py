"""Warm restart: time to 90 percent of the pre-restart DRAM hit rate, cold restart vs warm restart.

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench rewarm`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import policy_factory
from hicache_mooncake.tiers.rewarm import WarmOptions
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore
from hicache_mooncake.tools.replay.run import DEFAULT_BLOCK_BYTES
from hicache_mooncake.tools.replay.trace import Request, generate_trace, load_trace
from hicache_mooncake.tools.results_json import write_json

PAYLOAD = 4096
_SLAB = 1 << 20
_REGION = 4 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default=None, help="Mooncake-format trace (default: generated 'chat')")
    parser.add_argument("--policy", default="reuse", help="the store's policy (default: reuse)")
    parser.add_argument(
        "--capacity-fraction", type=float, default=0.2, help="DRAM+SSD as a share of unique blocks"
    )
    parser.add_argument("--dram-fraction", type=float, default=0.25, help="DRAM's share of that capacity")
    parser.add_argument(
        "--restart-at", type=float, default=0.5, help="restart after this share of the requests"
    )
    parser.add_argument("--window", type=int, default=500, help="requests per hit-rate window")
    parser.add_argument("--dir", default=None, help="where the SSD tier's files go (default: a temp dir)")
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N requests (0: all)")
    parser.add_argument(
        "--speedup", type=float, default=60.0, help="trace seconds per wall second after the restart"
    )
    parser.add_argument(
        "--block-bytes",
        type=int,
        default=DEFAULT_BLOCK_BYTES,
        help="bytes of a real page (sizes the re-warm budget)",
    )
    parser.add_argument(
        "--ssd-read-mbps", type=float, default=2000.0, help="re-warm read budget on the real disk"
    )
    parser.add_argument("--after", type=int, default=3000, help="requests replayed after the restart")


def _payload(key: str) -> np.ndarray:
    seed = xxhash.xxh64_intdigest(key.encode())
    return np.random.default_rng(seed).integers(0, 256, PAYLOAD, dtype=np.uint8)


class _Run:
    """The store of one mode, opened (and reopened) on one directory."""

    def __init__(
        self, directory: Path, policy: str, dram_blocks: int, ssd_blocks: int, warm: bool, rate_mbps: float
    ) -> None:
        self.directory = directory
        self.policy = policy
        self.dram_bytes = max(2, -(-dram_blocks * PAYLOAD // _SLAB)) * _SLAB
        per_region = (_REGION - 4096) // (4096 + PAYLOAD)
        self.ssd_bytes = max(4, -(-ssd_blocks // per_region) + 2) * _REGION
        self.warm = warm
        self.rate_mbps = rate_mbps
        self.store = self._open()
        self.wrong = 0

    def _open(self) -> TieredStore:
        engine = SsdEngine(
            SsdOptions(
                dirs=(str(self.directory),),
                capacity_bytes=self.ssd_bytes,
                region_size=_REGION,
                direct_io="off",
                verify_on_recover=False,
            )
        )
        tiers = [DramTier(self.dram_bytes, _SLAB, prefault=False), SsdTier(engine, promote_min_hits=1)]
        warm = WarmOptions(enabled=self.warm, interval_s=0, rate_mbps=self.rate_mbps)
        return TieredStore(tiers, policy_factory(self.policy), StoreOptions(warm=warm))

    def restart(self) -> float:
        start = time.monotonic()
        self.store.close(flush_timeout_s=60.0)
        self.store = self._open()
        return time.monotonic() - start

    def request(self, keys: Sequence[str]) -> tuple[int, int]:
        """One request as SGLang makes it; returns (pages hit, pages hit in DRAM)."""
        store = self.store
        n = store.exists_prefix(keys)
        hits = dram_hits = 0
        if n:
            assert store.dram is not None
            in_dram = store.dram.contains_batch(keys[:n])
            bufs = [np.empty(PAYLOAD, np.uint8) for _ in range(n)]
            ok = store.get_batch_into(keys[:n], [[b.data] for b in bufs])
            for key, buf, good, dram in zip(keys[:n], bufs, ok, in_dram, strict=True):
                if not good:
                    break
                hits += 1
                dram_hits += dram
                if not np.array_equal(buf, _payload(key)):
                    self.wrong += 1
        rest = keys[hits:]
        if rest:
            data = [_payload(k) for k in rest]
            store.put_batch(rest, [[d.data] for d in data], keys[hits - 1] if hits else None, hits)
        return hits, dram_hits

    def close(self) -> None:
        self.store.close()


def _replay(
    run: _Run,
    reqs: Sequence[Request],
    restart_at: int,
    window: int,
    speedup: float,
    restart: bool,
    after: int,
) -> dict[str, Any]:
    """Replay; returns per request after ``restart_at``: pages asked, pages hit in DRAM, trace
    seconds since the restart point (and the restart's figures)."""
    pre_pages: deque[int] = deque(maxlen=window)
    pre_dram: deque[int] = deque(maxlen=window)
    pages: list[int] = []
    dram: list[int] = []
    trace_s: list[float] = []
    restart_s = 0.0
    t_restart = 0.0
    wall0 = 0.0
    restarted = False  # what the restore did is read at the end: it runs in the background
    for i, req in enumerate(reqs[: restart_at + after]):
        if i == restart_at:
            if restart:
                restart_s = run.restart()
                restarted = True
            t_restart = req.timestamp
            wall0 = time.monotonic()
        if i >= restart_at:  # after the restart, requests come at their (sped up) trace times
            due = wall0 + (req.timestamp - t_restart) / 1000.0 / speedup
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
        keys = [f"b{b}" for b in req.hash_ids]
        _hits, dram_hits = run.request(keys)
        if i < restart_at:
            pre_pages.append(len(keys))
            pre_dram.append(dram_hits)
        else:
            pages.append(len(keys))
            dram.append(dram_hits)
            trace_s.append((req.timestamp - t_restart) / 1000.0)
    warm = run.store.warm
    return {
        "pre_restart_dram_hit_rate": sum(pre_dram) / max(sum(pre_pages), 1),
        "restart_s": round(restart_s, 3),
        "replay_wall_s": round(time.monotonic() - wall0, 3),
        "restore": dict(warm.last_restore) if restarted and warm is not None else {},
        "rewarmed_pages": int(warm.counts["rewarmed_pages"]) if warm is not None else 0,
        "wrong_bytes": run.wrong,
        "_pages": pages,
        "_dram": dram,
        "_trace_s": trace_s,
    }


def _windows(pages: Sequence[int], dram: Sequence[int], window: int) -> list[float]:
    """DRAM hit rate of the ``window`` requests ending at each request (from the ``window``-th)."""
    cp = np.concatenate([[0], np.cumsum(pages)])
    cd = np.concatenate([[0], np.cumsum(dram)])
    ends = np.arange(window, len(pages) + 1)
    return list((cd[ends] - cd[ends - window]) / np.maximum(cp[ends] - cp[ends - window], 1))


def _first(rates: Sequence[float], goal: Sequence[float] | float) -> int | None:
    """Index of the first window whose rate reaches 90% of ``goal`` (a rate, or one per window)."""
    for i, rate in enumerate(rates):
        target = goal if isinstance(goal, float) else goal[i]
        if rate >= 0.9 * target:
            return i
    return None


def _summary(out: dict[str, Any], base: dict[str, Any] | None, window: int) -> dict[str, Any]:
    rates = _windows(out["_pages"], out["_dram"], window)
    trace_s = out["_trace_s"]

    def at(index: int | None) -> dict[str, Any] | None:
        if index is None:
            return None
        last = index + window - 1  # the window's last request, counted from the restart
        return {"requests": last + 1, "trace_s": round(trace_s[last], 1)}

    summary = {k: v for k, v in out.items() if not k.startswith("_")}
    summary["first_window_dram_hit_rate"] = rates[0] if rates else 0.0
    summary["to_90_percent_of_pre_restart"] = at(_first(rates, out["pre_restart_dram_hit_rate"]))
    if base is not None:
        base_rates = _windows(base["_pages"], base["_dram"], window)
        summary["to_90_percent_of_no_restart"] = at(_first(rates, base_rates))
        summary["no_restart_first_window_dram_hit_rate"] = base_rates[0] if base_rates else 0.0
    summary["dram_hit_rate_after"] = sum(out["_dram"]) / max(sum(out["_pages"]), 1)
    return summary


def _line(mode: str, out: dict[str, Any]) -> str:
    def reach(key: str) -> str:
        at = out.get(key)
        return (
            f"{at['requests']} requests / {at['trace_s']:.0f} s of trace" if at else "not within the replay"
        )

    text = (
        f"{mode:5s}: DRAM hit rate before {out['pre_restart_dram_hit_rate']:.3f}, first window after "
        f"{out['first_window_dram_hit_rate']:.3f}, all after {out['dram_hit_rate_after']:.3f}"
    )
    if mode == "none":
        return text
    return (
        f"{text}; 90% of the pre-restart rate after {reach('to_90_percent_of_pre_restart')}; 90% of the "
        f"no-restart rate after {reach('to_90_percent_of_no_restart')}; re-warmed {out['rewarmed_pages']} pages"
    )


def run(args: argparse.Namespace) -> int:
    reqs = load_trace(args.trace) if args.trace else generate_trace("chat", seed=1)
    if args.limit:
        reqs = reqs[: args.limit]
    unique = len({b for r in reqs for b in r.hash_ids})
    capacity = max(16, int(unique * args.capacity_fraction))
    dram_blocks = round(capacity * args.dram_fraction)
    restart_at = int(len(reqs) * args.restart_at)
    # the re-warm budget in 4 KiB payloads: the real disk's pages per trace second, sped up
    rate_mbps = args.ssd_read_mbps * PAYLOAD / args.block_bytes * args.speedup
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="hicache-rewarm-"))
    results: dict[str, Any] = {
        "trace": args.trace or "generated:chat",
        "requests": len(reqs),
        "unique_blocks": unique,
        "capacity_blocks": capacity,
        "dram_blocks": dram_blocks,
        "policy": args.policy,
        "restart_at_request": restart_at,
        "window": args.window,
        "speedup": args.speedup,
        "block_bytes": args.block_bytes,
        "ssd_read_mbps": args.ssd_read_mbps,
        "rewarm_payload_mbps": rate_mbps,
        "modes": {},
    }
    raw: dict[str, dict[str, Any]] = {}
    try:
        for mode in ("none", "cold", "warm"):
            directory = base / mode
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            r = _Run(directory, args.policy, dram_blocks, capacity - dram_blocks, mode == "warm", rate_mbps)
            try:
                raw[mode] = _replay(
                    r, reqs, restart_at, args.window, args.speedup, mode != "none", args.after
                )
            finally:
                r.close()
            base_run = raw.get("none") if mode != "none" else None
            out = results["modes"][mode] = _summary(raw[mode], base_run, args.window)
            print(_line(mode, out), flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.json_out:
        write_json(args.json_out, results)
    wrong = sum(m["wrong_bytes"] for m in results["modes"].values())
    return 1 if wrong else 0
