"""``--sidecars mamba``: a hybrid model's Mamba state next to the KV pages of each request.

Per request (SGLang's order): after the KV hit run, the request can restore only up to the last
hit page whose state is cached too (the restorable prefix; that state is read); after its KV
pages are stored, the state at its last FULL page is stored (``full_pages``: a partial last block
is re-hashed when the conversation continues, so a state there could never be restored), naming the states of the chain's earlier
pages as superseded (``TieredStore.put_batch(supersedes=)``), as ``hybrid.py`` does with
SGLang's prefix keys. A state is ``state_bytes`` large and shares the capacity with the pages.
Sim mode only (``SimTieredStore``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hicache_mooncake.tiers.policy import ObjectType

from .sim import SimTieredStore

SIDECAR_KINDS = ("mamba",)


def state_key(page: str) -> str:
    return f"mamba:{page}"


class MambaSidecars:
    def __init__(
        self, store: SimTieredStore, state_bytes: int, full_pages: Sequence[int] | None = None
    ) -> None:
        """``full_pages[i]``: request i's full pages (default: all of them)."""
        if state_bytes <= 0:
            raise ValueError(f"state bytes must be positive, got {state_bytes}")
        self.store = store
        self.state_bytes = state_bytes
        self.state_hits = 0
        self.state_sets = 0
        self.full_pages = full_pages

    def restore(self, index: int, keys: list[str], hits: int) -> int:
        placement = self.store.placement
        for n in range(hits, 0, -1):
            key = state_key(keys[n - 1])
            if key in placement:
                ok = self.store.batch_get([key], ObjectType.MAMBA_STATE, self.state_bytes)
                self.state_hits += ok[0]
                return n if ok[0] else 0
        return 0

    def stored(self, index: int, keys: list[str]) -> None:
        n = len(keys) if self.full_pages is None else min(len(keys), self.full_pages[index])
        if n <= 0:
            return
        end = state_key(keys[n - 1])
        earlier = [state_key(k) for k in keys[: n - 1]]
        self.store.batch_set([end], keys[: n - 1], ObjectType.MAMBA_STATE, self.state_bytes, earlier)
        self.state_sets += 1
