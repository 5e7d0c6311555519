"""The host cache as a tier: with ``tiers.host_cache`` on, it is a backend's only tier.

The service (``hicache_mooncake.host_cache``) owns the DRAM arena, the SSD and the policy; this
tier is its client. Metadata (EXISTS, LOOKUP, ALLOC/COMMIT) goes over the service's Unix socket;
bytes move between SGLang's host pool and the shared arena by this process itself (the ``local``
engine: one copy each way, validated by object headers). An SSD hit is brought into the arena by
the service before LOOKUP answers. Sets carry the batch's ``SetHint`` (SGLang's prefix keys) so the
service's policy sees what an in-process policy would.

Failure semantics are the client's (``NodeClient``): a service that is down or slow is a miss /
False within ``io.timeout_s``, never an exception; the keeper (``on_close`` stops it) restarts
the service and this tier reconnects by itself (a new service is a new arena epoch, mapped at the
next call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hicache_mooncake.transport.node_client import NodeClient
from hicache_mooncake.transport.wire import SetHint

from .policy.hints import Hints
from .tier import PutItem, Tier


class HostCacheTier(Tier):
    name = "host_cache"
    write_through = True
    put_skips_present = True

    def __init__(
        self, client: NodeClient, on_close: Callable[[], None] | None = None, hints: Hints | None = None
    ) -> None:
        self.client = client
        self.hints = hints  # the store's hints: they reach the service's policy (host_cache.hint_forward)
        self._on_close = on_close
        self._closed = False

    def contains_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> list[bool]:
        return self.client.exists_batch(keys) if keys else []

    def put_batch(self, items: Sequence[PutItem], deadline: float | None = None) -> list[bool]:
        if not items:
            return []
        first = items[0][2]
        hint = SetHint(first.prefix_hits, first.prev_key)
        return self.client.put_batch([(key, parts) for key, parts, _ in items], int(first.obj_type), hint)

    def get_batch_into(
        self, items: Sequence[PutItem], deadline: float | None = None, *, fps: np.ndarray | None = None
    ) -> list[bool]:
        if not items:
            return []
        return self.client.get_batch_into([(key, parts) for key, parts, _ in items])

    def remove_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> int:
        return sum(self.client.remove_batch(keys)) if keys else 0

    def clear(self) -> None:
        self.client.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            self._on_close()
        self.client.close()

    def stats(self) -> dict[str, Any]:
        """The service's figures (its store and tiers, per-client accounting) and this client's."""
        raw = self.client.stats()
        node = raw.get("node") or {}
        store = node.get("store") or {}
        return {
            "tier": self.name,
            "reachable": raw.get("reachable", False),
            "entries": int(store.get("objects", 0)),
            "used_bytes": int(store.get("used", 0)),
            "capacity_bytes": int(store.get("capacity", 0)),
            "service": node,
            "client": raw.get("client", {}),
        }
