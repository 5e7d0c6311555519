"""The one place that decides which tier serves a get and where a set goes.

Tiers are ordered fastest first (DRAM, remote DRAM, SSD). Semantics SGLang relies on:
- ``exists_prefix`` counts the leading keys present in any tier and stops at the first miss.
- ``get_batch_into`` tries each tier in order for the keys still missing; a key's result is True
  only if its bytes were copied in full. Results after the first miss are False (SGLang uses only
  the leading run, so later keys are not fetched at all).
- ``put_batch`` stores keys that no tier holds yet into the first tier that accepts them; a key
  already present anywhere counts as stored (values are immutable).

Each call builds one ``AccessContext`` per key from the call's key order, so policies see
prefix positions and chain parents exactly as SGLang sent them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .demoter import Demoter
from .parts import Parts
from .policy import AccessContext, ObjectType
from .policy.contexts import get_contexts, set_contexts
from .tier import Tier

_REQUEST_MEMORY = 1 << 16


class TieredStore:
    """``demoter`` (optional) moves pages DRAM -> SSD in the background; with
    ``background_copy`` every set is also queued for an SSD copy (write-through without making
    the set wait for the disk)."""

    def __init__(
        self, tiers: Sequence[Tier], demoter: Demoter | None = None, background_copy: bool = False
    ) -> None:
        if not tiers:
            raise ValueError("TieredStore needs at least one tier")
        self.tiers = list(tiers)
        self.demoter = demoter
        self.background_copy = background_copy and demoter is not None
        # request length by first key of each exists call: a later get of that run knows it
        self._request_len: OrderedDict[str, int] = OrderedDict()
        self._request_len_lock = threading.Lock()

    def _remember_request(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with self._request_len_lock:
            self._request_len[keys[0]] = len(keys)
            self._request_len.move_to_end(keys[0])
            if len(self._request_len) > _REQUEST_MEMORY:
                self._request_len.popitem(last=False)

    def _request_len_of(self, keys: Sequence[str]) -> int:
        with self._request_len_lock:
            return self._request_len.get(keys[0], 0) if keys else 0

    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """Caller memory that pages will be copied from and into (SGLang's host pool buffers),
        announced once before the first call: tiers whose transport must register memory (RDMA
        memory regions, Mooncake's ``register_buffer``) do it here; the others ignore it. A
        tier that cannot register keeps working through its slower path (never raises)."""
        for tier in self.tiers:
            tier.register_memory(regions)

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    def exists_prefix(self, keys: Sequence[str]) -> int:
        self._remember_request(keys)
        present = self.contains_batch(keys)
        for i, ok in enumerate(present):
            if not ok:
                return i
        return len(keys)

    def contains_batch(self, keys: Sequence[str]) -> list[bool]:
        """Per key, whether any tier holds it (no prefix cut: hybrid models' sidecar objects
        have holes that matter)."""
        present = [False] * len(keys)
        pending = list(range(len(keys)))
        for tier in self.tiers:
            if not pending:
                break
            found = tier.contains_batch([keys[i] for i in pending])
            for i, ok in zip(pending, found, strict=True):
                present[i] = ok
            pending = [i for i in pending if not present[i]]
        return present

    def get_batch_into(
        self, keys: Sequence[str], parts: Sequence[Parts], obj_type: ObjectType = ObjectType.KV_PAGE
    ) -> list[bool]:
        sizes = [sum(p.nbytes for p in ps) for ps in parts]
        ctxs = get_contexts(keys, sizes, self._request_len_of(keys), obj_type=obj_type)
        done, level_of = self._read_through(keys, parts, ctxs)
        for level in range(1, len(self.tiers)):
            tier = self.tiers[level]
            hot = [
                i
                for i, lv in enumerate(level_of)
                if lv == level and done[i] and tier.should_promote(keys[i], ctxs[i])
            ]
            self._promote(level, hot, keys, parts, ctxs)
        return done

    def _read_through(
        self, keys: Sequence[str], parts: Sequence[Parts], ctxs: Sequence[AccessContext]
    ) -> tuple[list[bool], list[int]]:
        """Read each key from the first tier that has it. Returns per key whether its bytes were
        copied and from which tier level (-1: none); results after the first miss are False,
        since SGLang uses only the leading run."""
        done = [False] * len(keys)
        level_of = [-1] * len(keys)
        pending = list(range(len(keys)))
        for level, tier in enumerate(self.tiers):
            if not pending:
                break
            got = tier.get_batch_into([(keys[i], parts[i], ctxs[i]) for i in pending])
            for i, ok in zip(pending, got, strict=True):
                if ok:
                    done[i], level_of[i] = True, level
            pending = [i for i in pending if not done[i]]
        if False in done:
            first_miss = done.index(False)
            done[first_miss:] = [False] * (len(done) - first_miss)
        return done, level_of

    def _promote(
        self,
        level: int,
        idx: list[int],
        keys: Sequence[str],
        parts: Sequence[Parts],
        ctxs: list[AccessContext],
    ) -> None:
        """Copy objects just read from tier ``level`` (now in the caller's buffers) upward."""
        if not idx:
            return
        promoted = [replace(ctxs[i], promoted=True) for i in idx]
        for tier in self.tiers[:level]:
            tier.put_batch([(keys[i], parts[i], c) for i, c in zip(idx, promoted, strict=True)])
        if self.demoter is not None:
            self.demoter.notify()

    def put_batch(
        self,
        keys: Sequence[str],
        parts: Sequence[Parts],
        prev_key: str | None = None,
        prefix_len: int | None = None,
        obj_type: ObjectType = ObjectType.KV_PAGE,
    ) -> list[bool]:
        """Store in the first tier that accepts each key, and in every write-through tier.

        ``prefix_len``: pages of the request stored before this call (SGLang's ``prefix_keys``);
        when unknown, the call's leading run of already-stored keys stands in for it."""
        found = [tier.contains_batch(keys) for tier in self.tiers]
        stored = [any(col) for col in zip(*found, strict=True)] if found else []
        prefix_hits = (
            prefix_len if prefix_len is not None else (stored.index(False) if False in stored else len(keys))
        )
        sizes = [sum(p.nbytes for p in ps) for ps in parts]
        ctxs = set_contexts(keys, prefix_hits, prev_key, sizes, obj_type=obj_type)
        primary = [i for i, ok in enumerate(stored) if not ok]
        for level, tier in enumerate(self.tiers):
            todo = [
                i for i in range(len(keys)) if not found[level][i] and (tier.write_through or i in primary)
            ]
            if not todo:
                continue
            ok_list = tier.put_batch([(keys[i], parts[i], ctxs[i]) for i in todo])
            for i, ok in zip(todo, ok_list, strict=True):
                stored[i] = stored[i] or ok
            ok_set = {i for i, ok in zip(todo, ok_list, strict=True) if ok}
            primary = [i for i in primary if i not in ok_set]
            if level == 0 and self.background_copy and self.demoter is not None and ok_set:
                self.demoter.copy_later([keys[i] for i in sorted(ok_set)])
        if self.demoter is not None:
            self.demoter.notify()
        return stored

    def remove(self, key: str) -> bool:
        return any([tier.remove(key) for tier in self.tiers])

    def clear(self) -> None:
        for tier in self.tiers:
            tier.clear()

    def close(self, flush_timeout_s: float = 0.0) -> None:
        """Stop background movement first (it reads DRAM and writes SSD); with a flush timeout,
        copy DRAM pages the SSD lacks to the SSD (bounded by it); then close every tier."""
        if self.demoter is not None:
            self.demoter.close()
            if flush_timeout_s > 0:
                self.demoter.drain_dram(flush_timeout_s)
        for tier in self.tiers:
            tier.close()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {tier.name: tier.stats() for tier in self.tiers}
        if self.demoter is not None:
            out["ssd"] = {**out.get("ssd", {}), "background": self.demoter.stats()}
        return out
