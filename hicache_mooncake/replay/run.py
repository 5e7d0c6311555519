"""One replay (policy vs LRU vs OPT at one capacity), capacity sweeps, and the JSON result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .reference import capacity_blocks, lru_hit_rate, next_uses, opt_hit_rate, unique_blocks
from .sim import ReplayStore, SimTieredStore, drive
from .trace import load_trace

#: The policy this project ships as the default (``policy:`` in configs/default.yaml).
DEFAULT_POLICY = "reuse"
DEFAULT_DRAM_FRACTION = 0.25
#: Nominal page size for the bytes-moved counters: 512 tokens of Llama-3-8B KV in bf16 (64 MiB).
DEFAULT_BLOCK_BYTES = 512 * 2 * 32 * 8 * 128 * 2
SWEEP_FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.20, 0.40)

StoreFactory = Callable[[str, int, float, int], ReplayStore]
ProgressFor = Callable[[float], AbstractContextManager[Callable[[int], None] | None]]
_store_factory: StoreFactory | None = None


def register_store_factory(factory: StoreFactory | None) -> None:
    """Plug the real store into ``--mode store``: ``factory(policy, capacity_blocks,
    dram_fraction, block_bytes)`` returns a ``ReplayStore`` (e.g. an adapter over TieredStore)."""
    global _store_factory
    _store_factory = factory


def make_store(mode: str, policy: str, capacity: int, dram_fraction: float, block_bytes: int) -> ReplayStore:
    if mode == "sim":
        return SimTieredStore.build(policy, capacity, dram_fraction, block_bytes)
    if mode == "store":
        if _store_factory is not None:
            return _store_factory(policy, capacity, dram_fraction, block_bytes)
        from .tiered import TieredReplayStore

        return TieredReplayStore(policy, capacity, dram_fraction, block_bytes)
    raise ValueError(f"unknown replay mode {mode!r}; known: sim, store")


def configured_default_policy() -> str:
    """``tiers.policy`` of the packaged configs/default.yaml, else ``DEFAULT_POLICY``."""
    try:
        from hicache_mooncake.presets import load_preset

        value = (load_preset("default").get("tiers") or {}).get("policy")
    except Exception:
        return DEFAULT_POLICY
    return value if isinstance(value, str) and value else DEFAULT_POLICY


@dataclass
class Replay:
    """A loaded trace with what every replay of it needs (block lists, next uses)."""

    path: str
    blocks: list[tuple[int, ...]]
    unique: int
    _nxt: list[list[int]] | None = None

    @classmethod
    def load(cls, path: str | Path) -> Replay:
        blocks = [r.hash_ids for r in load_trace(path)]
        return cls(str(path), blocks, unique_blocks(blocks))

    @property
    def nxt(self) -> list[list[int]]:
        if self._nxt is None:
            self._nxt = next_uses(self.blocks)
        return self._nxt

    def capacity(self, fraction: float) -> int:
        return capacity_blocks(self.blocks, fraction, self.unique)

    def run(
        self,
        policy: str,
        fraction: float,
        dram_fraction: float = DEFAULT_DRAM_FRACTION,
        mode: str = "sim",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        cap = self.capacity(fraction)
        store = make_store(mode, policy, cap, dram_fraction, block_bytes)
        out = drive(self.blocks, store, progress=progress)
        lru = lru_hit_rate(self.blocks, cap)
        opt = opt_hit_rate(self.blocks, cap, self.nxt)
        stats = store.replay_stats()
        hits = out.hits
        tier_hits = stats.get("dram_hits", 0) + stats.get("ssd_hits", 0)
        gap = opt - lru
        result: dict[str, Any] = {
            "trace": self.path,
            "mode": mode,
            "requests": out.requests,
            "blocks": out.blocks,
            "unique_blocks": self.unique,
            "capacity_fraction": fraction,
            "capacity_blocks": cap,
            "dram_fraction": dram_fraction,
            "dram_blocks": round(cap * dram_fraction),
            "ssd_blocks": cap - round(cap * dram_fraction),
            "block_bytes": block_bytes,
            "policy": policy,
            "hits": hits,
            "hit_rate": out.hit_rate,
            "lru_hit_rate": lru,
            "opt_hit_rate": opt,
            "gap_fraction": (out.hit_rate - lru) / gap if gap > 0 else 0.0,
            "dram_hits": stats.get("dram_hits", 0),
            "ssd_hits": stats.get("ssd_hits", 0),
            "dram_hit_share": stats.get("dram_hits", 0) / tier_hits if tier_hits else 0.0,
            "counters": stats,
            "bytes": {
                "promoted": stats.get("promotions", 0) * block_bytes,
                "demoted": stats.get("demotions", 0) * block_bytes,
                "ssd_written": stats.get("ssd_writes", 0) * block_bytes,
                "dram_read": stats.get("dram_hits", 0) * block_bytes,
                "ssd_read": stats.get("ssd_hits", 0) * block_bytes,
            },
        }
        return result

    def sweep(
        self,
        policy: str,
        fractions: Sequence[float] = SWEEP_FRACTIONS,
        dram_fraction: float = DEFAULT_DRAM_FRACTION,
        progress_for: ProgressFor | None = None,
    ) -> dict[str, list[float]]:
        """Hit rate vs capacity fraction for ``policy`` (sim), LRU and OPT. ``progress_for(f)``
        gives, per replay, a context whose value is called once per request."""
        out: dict[str, list[float]] = {"fraction": [], "policy": [], "lru": [], "opt": []}
        for f in fractions:
            with progress_for(f) if progress_for is not None else nullcontext() as progress:
                r = self.run(policy, f, dram_fraction, "sim", progress=progress)
            out["fraction"].append(f)
            out["policy"].append(r["hit_rate"])
            out["lru"].append(r["lru_hit_rate"])
            out["opt"].append(r["opt_hit_rate"])
        return out
