"""Remote DRAM tier: a pool shared by every instance, stored by a *provider* (``pool_providers``).

This class is the same for every provider (``tiers.remote.provider``: ``nodes`` or ``mooncake``):
- write-through (``write_through``): the stores put every set here too, so other instances find
  it; promotion of pool hits into local DRAM (``promote_on_hit``);
- deadlines: a provider whose calls can block (``provider.blocking``) runs under a ``CallGuard``:
  no call waits longer than ``timeout_s`` (or the caller's earlier absolute ``deadline``); after a timeout or an unreachable pool every call is an
  immediate miss until the provider's ``probe()`` succeeds (the tier rejoins by itself);
- misses, never exceptions: anything a provider raises is a miss / refused write, counted;
- counters (``stats()["calls"]``): keys asked, hits, bytes in and out, failures, per operation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .call_guard import CallGuard
from .parts import pages_nbytes
from .policy import AccessContext
from .pool_providers.base import Item, PoolProvider, PoolUnavailable
from .tier import PutItem, Tier

log = logging.getLogger(__name__)
R = TypeVar("R")


class RemoteDramTier(Tier):
    name = "remote"

    def __init__(
        self,
        provider: PoolProvider,
        write_through: bool = True,
        promote_on_hit: bool = True,
        timeout_s: float = 2.0,
    ) -> None:
        self.provider = provider
        self.write_through = write_through
        self.promote_on_hit = promote_on_hit
        self.timeout_s = timeout_s
        self.guard = (
            CallGuard(provider.probe, retry_interval_s=provider.retry_interval_s)
            if provider.blocking
            else None
        )
        self.counters: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._logged: set[str] = set()
        if self.guard is not None:  # first connection within the deadline, else in the background
            self.guard.call(self._first_probe, timeout_s)

    def _first_probe(self) -> bool:
        if not self.provider.probe():
            raise PoolUnavailable(f"{self.provider.name}: pool not reachable at start")
        return True

    # ------------------------------------------------------------------ plumbing
    def _call(
        self, op: str, fn: Callable[[], list[R]], n: int, miss: R, deadline: float | None = None
    ) -> list[R]:
        """``fn()`` under the deadline of ``op`` (and the caller's absolute ``deadline``, when it
        is earlier); any failure is ``[miss] * n``, counted."""
        try:
            if self.guard is None:
                out = fn()
            else:
                wait_s = self.provider.deadline_s(op, self.timeout_s)
                if deadline is not None:
                    wait_s = min(wait_s, deadline - time.monotonic())
                if wait_s <= 0:
                    self._count(f"{op}_late", n)
                    return [miss] * n
                got = self.guard.call(fn, wait_s)
                if got is None:
                    self._count(f"{op}_unanswered", n)
                    return [miss] * n
                out = got
        except PoolUnavailable as exc:
            self._note(op, exc)
            self._count(f"{op}_unavailable", n)
            return [miss] * n
        except Exception as exc:  # a provider bug must not reach SGLang
            self._note(op, exc)
            self._count(f"{op}_errors", n)
            return [miss] * n
        if len(out) != n:
            self._note(op, RuntimeError(f"provider answered {len(out)} results for {n} keys"))
            self._count(f"{op}_errors", n)
            return [miss] * n
        return out

    def _count(self, name: str, value: int = 1) -> None:
        with self._count_lock:
            self.counters[name] += value

    def _note(self, op: str, exc: BaseException) -> None:
        if op not in self._logged:
            self._logged.add(op)
            log.warning("hicache-mooncake: remote %s failed (%s); counted from now on", op, exc)

    # ------------------------------------------------------------------ Tier
    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """SGLang's host pool buffers, to the provider (nodes: the RDMA engine registers them;
        mooncake: ``register_buffer``), so pages move with no copy."""
        try:
            self.provider.register_memory(regions)
        except Exception as exc:  # the provider keeps working through its slower path
            self._note("register_memory", exc)

    def should_promote(self, key: str, ctx: AccessContext) -> bool:
        return self.promote_on_hit

    def contains_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> list[bool]:
        if not keys:
            return []
        found = self._call("exists", lambda: self.provider.exists_batch(keys), len(keys), False)
        self._count("exists_keys", len(keys))
        self._count("exists_found", sum(found))
        return found

    def put_batch(self, items: Sequence[PutItem], deadline: float | None = None) -> list[bool]:
        if not items:
            return []
        obj_type = int(items[0][2].obj_type)
        plain: list[Item] = [(key, parts) for key, parts, _ in items]
        ok = self._call("put", lambda: self.provider.put_batch(plain, obj_type), len(plain), False)
        self._count("put_keys", len(plain))
        self._count("put_stored", sum(ok))
        self._count("put_bytes", pages_nbytes([ps for _, ps in plain], ok))
        self.events.stored(self.name, [key for (key, _), done in zip(plain, ok, strict=True) if done])
        return ok

    def get_batch_into(
        self, items: Sequence[PutItem], deadline: float | None = None, *, fps: np.ndarray | None = None
    ) -> list[bool]:
        if not items:
            return []
        plain: list[Item] = [(key, parts) for key, parts, _ in items]
        ok = self._call("get", lambda: self.provider.get_batch_into(plain), len(plain), False)
        self._count("get_keys", len(plain))
        self._count("get_hits", sum(ok))
        self._count("get_bytes", pages_nbytes([ps for _, ps in plain], ok))
        return ok

    def remove_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> int:
        if not keys:
            return 0
        done = self._call("remove", lambda: self.provider.remove_batch(keys), len(keys), False)
        gone = [key for key, ok in zip(keys, done, strict=True) if ok]
        if gone:
            self.events.removed(self.name, gone)
        return len(gone)

    def clear(self) -> None:
        self._call("clear", lambda: [self.provider.clear()], 1, None)
        self.events.cleared(self.name)

    def close(self) -> None:
        """Close the provider, waiting at most ``timeout_s`` for it (a provider stuck in native
        code is left to finish on a daemon thread); then stop the guard."""
        closer = threading.Thread(target=self._close_provider, name="hicache-pool-close", daemon=True)
        closer.start()
        closer.join(self.timeout_s)
        if self.guard is not None:
            self.guard.close()

    def _close_provider(self) -> None:
        try:
            self.provider.close()
        except Exception as exc:
            self._note("close", exc)

    def stats(self) -> dict[str, Any]:
        try:
            pool = self.provider.stats()
        except Exception as exc:
            pool = {"error": f"{type(exc).__name__}: {exc}"}
        with self._count_lock:
            calls = dict(self.counters)
        out = {"tier": self.name, "provider": self.provider.name, **pool, "calls": calls}
        if self.guard is not None:
            out["guard"] = self.guard.stats()
        return out
