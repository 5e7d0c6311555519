"""``--mode store`` on the real stack: ``TieredStore`` over a real ``DramTier`` and a real
``SsdTier`` (region files in a temporary directory), with small payloads that are written,
read back and byte-checked on every hit.

The store is driven with SGLang's call sequence by ``sim.drive``; the background mover is
flushed after each call so the replay is deterministic and its hit count must equal ``sim``'s
(the test suite checks it). SSD space is sized so that whole-region reclaim never drops a page
the placement still holds (``lost_to_reclaim`` in the stats says whether that held; redundant SSD
copies of pages back in DRAM may be reclaimed, ``ssd_reclaimed``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import policy_factory
from hicache_mooncake.tiers.policy.hints import Hints
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAYLOAD = 4096
_SLAB = 1 << 20
_REGION = 4 << 20


def _payload(key: str) -> np.ndarray:
    seed = xxhash.xxh64_intdigest(key.encode())
    return np.random.default_rng(seed).integers(0, 256, PAYLOAD, dtype=np.uint8)


class TieredReplayStore:
    def __init__(
        self, policy: str, capacity: int, dram_fraction: float, block_bytes: int, hints: Hints | None = None
    ) -> None:
        dram_blocks = round(capacity * dram_fraction)
        ssd_blocks = capacity - dram_blocks
        base = "/dev/shm" if Path("/dev/shm").is_dir() else None
        self._dir = tempfile.mkdtemp(prefix="hicache-replay-", dir=base)
        per_slab = _SLAB // PAYLOAD
        dram = DramTier(-(-(dram_blocks + 2 * per_slab) // per_slab) * _SLAB, _SLAB, prefault=False)
        per_region = (_REGION - 4096) // (4096 + PAYLOAD)
        regions = max(4, -(-16 * max(ssd_blocks, 1) // per_region) + 2)
        engine = SsdEngine(
            SsdOptions(
                dirs=(self._dir,),
                capacity_bytes=regions * _REGION,
                region_size=_REGION,
                direct_io="off",
                verify_on_recover=False,
                reinsertion_hits=0,
            )
        )
        self.ssd = SsdTier(engine, promote_min_hits=1)
        self.dram = dram
        tiers = [t for t, n in ((dram, dram_blocks), (self.ssd, ssd_blocks)) if n > 0] or [dram]
        # no watermark hysteresis: DRAM holds exactly the most recent pages, as in ``--mode sim``
        self.store = TieredStore(
            tiers,
            policy_factory(policy),
            StoreOptions(dram_high=1.0, dram_low=1.0),
            capacity=(capacity * PAYLOAD, dram_blocks * PAYLOAD),
            hints=hints,
        )
        self.block_bytes = block_bytes
        self.wrong_bytes = 0
        self._hits_before = {"dram": 0, "ssd": 0}

    # ---- ReplayStore --------------------------------------------------------------------------
    def batch_exists(self, keys: Sequence[str]) -> int:
        return self.store.exists_prefix(keys)

    def batch_get(self, keys: Sequence[str]) -> list[bool]:
        bufs = [np.empty(PAYLOAD, np.uint8) for _ in keys]
        ok = self.store.get_batch_into(keys, [[b.data] for b in bufs])
        for key, buf, hit in zip(keys, bufs, ok, strict=True):
            if hit and not np.array_equal(buf, _payload(key)):
                self.wrong_bytes += 1
        self._settle()
        return ok

    def batch_set(self, keys: Sequence[str], prefix_keys: Sequence[str] = ()) -> list[bool]:
        data = [_payload(k) for k in keys]
        prev = prefix_keys[-1] if prefix_keys else None
        ok = self.store.put_batch(keys, [[d.data] for d in data], prev, len(prefix_keys))
        self._settle()
        return ok

    def replay_stats(self) -> dict[str, int]:
        """``sim.TIER_COUNTERS`` with the meaning ``SimTieredStore`` gives them, from the real
        store's counters: writes are the SSD engine's puts (a demoted page whose SSD copy
        survived its promotion is not written again), evictions count placement decisions by
        the tier the page was placed in."""
        tiers = self.store.stats()
        placement = tiers.get("placement", {})
        dram = tiers.get("dram", {})
        ssd = tiers.get("ssd", {})
        demotions = int(placement.get("demotions", 0))
        return {
            "dram_hits": int(dram.get("hits", 0)),
            "ssd_hits": int(ssd.get("hits", 0)),
            "promotions": int(placement.get("promotions", 0)),
            "demotions": demotions,
            "ssd_writes": int(ssd.get("puts", 0)),
            "dram_evictions": demotions + int(placement.get("dropped_dram", 0)),
            "ssd_evictions": int(placement.get("dropped_ssd", 0)),
            "dram_admit_refused": int(placement.get("not_admitted", 0)),
            "ssd_admit_refused": 0,
            "ssd_reclaimed": int(ssd.get("evicted_entries", 0)),
            "lost_to_reclaim": int(placement.get("forgotten", 0)),
            "wrong_bytes": self.wrong_bytes,
        }

    def _settle(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)


def tiered_store_factory(policy: str, capacity: int, dram_fraction: float, block_bytes: int) -> Any:
    return TieredReplayStore(policy, capacity, dram_fraction, block_bytes)
