"""``HostPoolSet``: the host pools SGLang registered on one attach and their key spaces.

SGLang registers the KV anchor (``register_mem_pool_host``), then every ``HostPoolGroup`` entry
(``register_mem_host_pool_v2``, the KV pool again under ``"kv"``), then says the burst is over
(``on_host_pools_registered``, 0.5.23). The key space is fixed at the end of the burst, or at the
first data call on releases that do not announce it, so that the model digest covers every pool
of the burst (``keys.py``). A pool registered later (a dynamic sidecar) is keyed at once, by the
model digest and its own geometry digest.

Thread safety: registration runs on SGLang's scheduler thread, lookups on its storage threads;
the name map is replaced, never mutated, so a lookup sees a whole registration or none of it.
"""

from __future__ import annotations

import threading
from typing import Any

from hicache_mooncake.keys import RankInfo, build_keyspace, pool_geometry, sidecar_keyspace
from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews
from hicache_mooncake.sglang_adapter.host_pools.names import KV, object_type_for, pool_name, rank_sharded
from hicache_mooncake.sglang_adapter.host_pools.provider import provider_for
from hicache_mooncake.sglang_adapter.host_pools.registered import RegisteredPool


class HostPoolSet:
    def __init__(self, model: str, tenant: str, io_path: str, ranks: RankInfo) -> None:
        self.model, self.tenant, self.io_path, self.ranks = model, tenant, io_path, ranks
        self._pools: dict[str, RegisteredPool] = {}
        self._lock = threading.Lock()
        self._final = False
        self._region_bases: set[int] = set()

    # ------------------------------------------------------------------ registration
    def register(self, name: Any, pool: Any) -> list[memoryview]:
        """Register ``pool`` under ``name``; returns the buffer regions not registered before (for
        the store's memory registration). The KV pool registered again under ``"kv"`` by the v2
        burst is the anchor already: nothing new."""
        key = pool_name(name)
        with self._lock:
            known = self._pools.get(key)
            if known is not None and known.pool is pool:
                return []
            provider = provider_for(pool)
            entry = RegisteredPool(
                name=key,
                pool=pool,
                provider=provider,
                memory=HostPoolViews(provider.buffers(pool)),
                obj_type=object_type_for(key),
                rank_sharded=rank_sharded(key, pool),
            )
            _ = entry.affine_runs  # probed now, not in the first data call
            if known is not None:
                known.close()
            if self._final:
                self._key(entry)
            self._pools = {**self._pools, key: entry}
            fresh = []
            for base, region in zip(entry.memory.bases, entry.memory.regions(), strict=True):
                if base not in self._region_bases:
                    self._region_bases.add(base)
                    fresh.append(region)
            return fresh

    def finalize(self) -> bool:
        """Fix the key spaces (idempotent). False while no KV pool is registered."""
        if self._final:
            return True
        with self._lock:
            if self._final:
                return True
            if KV not in self._pools:
                return False
            self._final = True
            for entry in self._pools.values():
                self._key(entry)
            return True

    def _key(self, entry: RegisteredPool) -> None:
        kv = self._pools[KV]
        if kv.keys is None:
            sidecars = {n: pool_geometry(p.pool) for n, p in self._pools.items() if n != KV}
            kv.keys = build_keyspace(
                self.model, self.tenant, pool_geometry(kv.pool), self.io_path, self.ranks, sidecars
            )
        if entry is not kv:
            replicated = self.ranks.replicated_kv and not entry.rank_sharded
            entry.keys = sidecar_keyspace(
                kv.keys, entry.name, pool_geometry(entry.pool), self.ranks, replicated
            )

    # ------------------------------------------------------------------ lookup
    @property
    def final(self) -> bool:
        return self._final

    def get(self, name: Any) -> RegisteredPool | None:
        return self._pools.get(pool_name(name))

    @property
    def kv(self) -> RegisteredPool | None:
        return self._pools.get(KV)

    def names(self) -> list[str]:
        return list(self._pools)

    def close(self) -> None:
        with self._lock:
            pools, self._pools = self._pools, {}
        for entry in pools.values():
            entry.close()
