"""A payload-holding in-memory two-tier store for ``--mode store`` until TieredStore plugs in.

It keeps real (small) byte payloads per key in a DRAM dict and an SSD dict, moves them on
promotion and demotion, and verifies on every get that the bytes are those that were set. Placement
decisions come from the same policy objects and the same call sequence as ``SimTieredStore``, so
``store`` and ``sim`` must agree on hits (a test checks it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .sim import SimTieredStore


def payload_of(key: str, size: int = 64) -> bytes:
    """Deterministic small payload of a key (what the store must give back)."""
    seed = hashlib.blake2b(key.encode(), digest_size=16).digest()
    return (seed * (size // len(seed) + 1))[:size]


@dataclass
class MemoryTwoTierStore(SimTieredStore):
    payload_size: int = 64
    data: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"dram": {}, "ssd": {}})
    corrupt_reads: int = 0
    _where: dict[str, str] = field(default_factory=dict)
    _incoming: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        policy: str,
        capacity_blocks: int,
        dram_fraction: float = 1.0,
        block_bytes: int = 0,
        **options: Any,
    ) -> MemoryTwoTierStore:
        base = SimTieredStore.build(policy, capacity_blocks, dram_fraction, block_bytes, **options)
        return cls(placement=base.placement, block_bytes=block_bytes)

    def _placed(self, key: str, tier: str | None) -> None:
        old = self._where.pop(key, None)
        payload = self.data[old].pop(key) if old is not None else self._incoming.get(key)
        if tier is None or payload is None:
            return
        self.data[tier][key] = payload
        self._where[key] = tier

    def batch_get(self, keys: Sequence[str]) -> list[bool]:
        before = []
        for key in keys:
            where = self._where.get(key)
            before.append(self.data[where].get(key) if where is not None else None)
        ok = super().batch_get(keys)
        out = []
        for key, payload, hit in zip(keys, before, ok, strict=True):
            good = hit and payload == payload_of(key, self.payload_size)
            if hit and not good:
                self.corrupt_reads += 1
            out.append(good)
        return out

    def batch_set(self, keys: Sequence[str], prefix_keys: Sequence[str] = ()) -> list[bool]:
        for key in keys:  # SGLang hands over every page of the call, stored or not
            self._incoming[key] = payload_of(key, self.payload_size)
        super().batch_set(keys, prefix_keys)
        self._incoming.clear()
        return [key in self._where for key in keys]

    def resident(self) -> int:
        return len(self._where)
