"""One replay (policy vs LRU vs OPT at one capacity), capacity sweeps, and the JSON result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hicache_mooncake.tiers.policy import EvictionPolicy
from hicache_mooncake.tiers.policy.hints import Hints

from .hints import SimulatedHints, apply_hint, replay_hints, trace_hints, with_errors
from .reference import (
    capacity_blocks,
    is_prefix_closed,
    lru_hit_rate,
    next_uses,
    opt_hit_rate,
    unique_blocks,
)
from .sidecars import SIDECAR_KINDS, MambaSidecars
from .sim import ReplayStore, SimTieredStore, drive
from .timing import CallRecorder, us_per_access
from .trace import BLOCK_TOKENS, load_trace

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


def make_store(
    mode: str,
    policy: str,
    capacity: int,
    dram_fraction: float,
    block_bytes: int,
    hints: Hints | None = None,
    wrap: Callable[[EvictionPolicy], EvictionPolicy] | None = None,
    type_aware: bool = True,
) -> ReplayStore:
    """``hints``/``wrap`` (a ``CallRecorder``) and ``type_aware`` are for ``sim``; ``store``
    takes ``hints`` too."""
    if mode == "sim":
        return SimTieredStore.build(
            policy, capacity, dram_fraction, block_bytes, hints=hints, wrap=wrap, type_aware=type_aware
        )
    if mode == "store":
        if _store_factory is not None:
            return _store_factory(policy, capacity, dram_fraction, block_bytes)
        from .tiered import TieredReplayStore

        return TieredReplayStore(policy, capacity, dram_fraction, block_bytes, hints=hints)
    raise ValueError(f"unknown replay mode {mode!r}; known: sim, store")


@dataclass(frozen=True)
class HintOptions:
    """``--hints simulated``: a continuation bit per request with these error rates (hints.py)."""

    recall: float = 0.9
    fpr: float = 0.1
    horizon: float = 4.0
    """A request continues when a later one extends it within ``horizon`` x capacity accesses."""
    seed: int = 0


@dataclass(frozen=True)
class SidecarOptions:
    """``--sidecars mamba``: a state object at each request's end (``sidecars.py``), sim mode."""

    kind: str = "mamba"
    state_fraction: float = 1.0
    """A state's size relative to a block's (``--state-size``)."""
    type_aware: bool = True
    """``tiers.type_aware_eviction`` (``--no-type-aware`` turns it off)."""

    def __post_init__(self) -> None:
        if self.kind not in SIDECAR_KINDS:
            raise ValueError(f"unknown sidecar kind {self.kind!r}; known: {', '.join(SIDECAR_KINDS)}")
        if self.state_fraction <= 0:
            raise ValueError(f"state size must be > 0 blocks, got {self.state_fraction}")


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
    full_blocks: list[int] | None = None
    """Per request, its full blocks (``input_length // BLOCK_TOKENS``); None: all."""
    prefix_closed: bool | None = None
    """Every block id always follows the same id (OPT is then an upper bound); None: not known yet."""

    @classmethod
    def load(cls, path: str | Path) -> Replay:
        reqs = load_trace(path)
        blocks = [r.hash_ids for r in reqs]
        full = [r.input_length // BLOCK_TOKENS for r in reqs]
        return cls(str(path), blocks, unique_blocks(blocks), full_blocks=full)

    @property
    def opt_is_bound(self) -> bool:
        """OPT is an upper bound on every policy's hit rate (the trace is prefix-closed)."""
        if self.prefix_closed is None:
            self.prefix_closed = is_prefix_closed(self.blocks)
        return self.prefix_closed

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
        prefix_keys: bool = True,
        hints: HintOptions | None = None,
        timing: bool = False,
        sidecars: SidecarOptions | None = None,
    ) -> dict[str, Any]:
        """One replay at ``fraction``. ``prefix_keys=False`` replays SGLang without
        ``hicache_storage_pass_prefix_keys``; ``hints`` adds simulated hints; ``timing`` measures
        the policy's and LRU's cost per block access (the policy calls of a sim replay);
        ``sidecars`` adds a state per request end and reports the restorable prefix (sim only)."""
        if sidecars is not None and (mode != "sim" or block_bytes <= 0):
            raise ValueError("sidecars are replayed in sim mode with a block size > 0")
        cap = self.capacity(fraction)
        hinter = self._hinter(hints, cap)
        recorder: list[CallRecorder] = []

        def record(p: EvictionPolicy) -> EvictionPolicy:
            recorder.append(CallRecorder(p))
            return recorder[0]

        wrap = record if timing and mode == "sim" else None
        type_aware = sidecars.type_aware if sidecars is not None else True
        store = make_store(
            mode, policy, cap, dram_fraction, block_bytes, self._hints_for(hinter), wrap, type_aware
        )
        before = self._before(hinter, store, recorder)
        states = None
        if sidecars is not None:
            assert isinstance(store, SimTieredStore)
            state_bytes = max(1, round(sidecars.state_fraction * block_bytes))
            states = MambaSidecars(store, state_bytes, self.full_blocks)
        out = drive(
            self.blocks, store, progress=progress, prefix_keys=prefix_keys, before=before, sidecars=states
        )
        lru = lru_hit_rate(self.blocks, cap)
        opt = opt_hit_rate(self.blocks, cap, self.nxt)
        if self.opt_is_bound and out.hit_rate > opt + 1e-12:
            raise AssertionError(
                f"{policy} hit rate {out.hit_rate:.6f} above OPT {opt:.6f} at {cap} blocks: OPT is an "
                "upper bound on a prefix-closed trace, so one of them is wrong"
            )
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
            "opt_is_upper_bound": self.opt_is_bound,
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
            "prefix_keys": prefix_keys,
            "hints": None if hinter is None or hints is None else {**asdict(hints), **hinter.summary()},
        }
        if states is not None and sidecars is not None:
            result["sidecars"] = {
                **asdict(sidecars),
                "state_bytes": states.state_bytes,
                "restorable": out.restorable,
                "restorable_rate": out.restorable / out.blocks if out.blocks else 0.0,
                "state_hits": states.state_hits,
                "state_sets": states.state_sets,
            }
        if timing:
            result.update(self._timing(policy, cap, dram_fraction, prefix_keys, hints, recorder))
        return result

    # ---- hints and timing --------------------------------------------------------------------
    def _hinter(self, hints: HintOptions | None, cap: int) -> SimulatedHints | None:
        if hints is None:
            return None
        trace = trace_hints(self.blocks, self.nxt, int(hints.horizon * cap))
        return SimulatedHints(trace, with_errors(trace.truth, hints.recall, hints.fpr, hints.seed))

    @staticmethod
    def _hints_for(hinter: SimulatedHints | None) -> Hints | None:
        if hinter is None:
            return None
        hinter.hints = replay_hints()
        return hinter.hints

    @staticmethod
    def _before(
        hinter: SimulatedHints | None, store: ReplayStore, recorder: list[CallRecorder]
    ) -> Callable[[int, list[str]], None] | None:
        if hinter is None:
            return None
        if not recorder:
            return hinter

        t = hinter.trace

        def before(index: int, keys: list[str]) -> None:
            args = (index, keys, t.shared[index], t.conversation[index], hinter.reported[index])
            recorder[0].hint(lambda h: apply_hint(h, *args))
            hinter(index, keys)

        return before

    def _timing(
        self,
        policy: str,
        cap: int,
        dram_fraction: float,
        prefix_keys: bool,
        hints: HintOptions | None,
        recorder: list[CallRecorder],
    ) -> dict[str, Any]:
        """Policy and LRU cost per block access: each one's recorded calls, replayed alone."""
        accesses = sum(len(b) for b in self.blocks)
        out: dict[str, Any] = {}
        for name, key in ((policy, "policy_us_per_access"), ("lru", "lru_us_per_access")):
            if name == policy and recorder:
                calls = recorder[0].calls
            else:
                rec: list[CallRecorder] = []

                def record(p: EvictionPolicy, rec: list[CallRecorder] = rec) -> EvictionPolicy:
                    rec.append(CallRecorder(p))
                    return rec[0]

                hinter = self._hinter(hints, cap) if name == policy else None
                store = make_store("sim", name, cap, dram_fraction, 0, self._hints_for(hinter), record)
                drive(self.blocks, store, prefix_keys=prefix_keys, before=self._before(hinter, store, rec))
                calls = rec[0].calls
            out[key] = us_per_access(calls, name, accesses, hints=hints is not None and name == policy)
        out["timing"] = "policy calls of a sim replay at this capacity, replayed alone; median of 3"
        return out

    def sweep(
        self,
        policy: str,
        fractions: Sequence[float] = SWEEP_FRACTIONS,
        dram_fraction: float = DEFAULT_DRAM_FRACTION,
        progress_for: ProgressFor | None = None,
        prefix_keys: bool = True,
        hints: HintOptions | None = None,
    ) -> dict[str, list[float]]:
        """Hit rate vs capacity fraction for ``policy`` (sim), LRU and OPT. ``progress_for(f)``
        gives, per replay, a context whose value is called once per request."""
        out: dict[str, list[float]] = {"fraction": [], "policy": [], "lru": [], "opt": []}
        for f in fractions:
            with progress_for(f) if progress_for is not None else nullcontext() as progress:
                r = self.run(
                    policy, f, dram_fraction, "sim", progress=progress, prefix_keys=prefix_keys, hints=hints
                )
            out["fraction"].append(f)
            out["policy"].append(r["hit_rate"])
            out["lru"].append(r["lru_hit_rate"])
            out["opt"].append(r["opt_hit_rate"])
        return out
