"""SGLang's v2 storage calls for hybrid models: ``batch_exists_v2``, ``batch_get_v2``, ``batch_set_v2``.

A hybrid model's KV pages still move through v1 (``backend.py``); its sidecar pools (Mamba state,
sliding-window KV, indexer, DeepSeek V4 compressed pools, draft KV) move here, one
``PoolTransfer`` per pool. Each page of a sidecar pool is one object (several, when larger than a
tier accepts: ``object_split.py``) keyed by the KV page hash it belongs to, tagged with the pool
(``keys.py``), typed (``ObjectType``) and moved zero-copy between the pool's host buffers and the
store, through every tier like a KV page.

Promises (as for v1):
- never raises; a bad transfer (unregistered pool, no host indices, an index count that is not
  ``keys x page_size``, an index outside the pool) is all-False for that transfer alone, logged
  once per cause; the other transfers of the call proceed;
- results are keyed by each transfer's own ``name`` object (SGLang looks them up by ``PoolName``);
- a replicated pool (MLA model, not rank-sharded) is stored by the storage-writer rank only; the
  other ranks report success without storing, as for v1;
- a logical pool (no bytes) moves nothing and succeeds; it is present wherever asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from hicache_mooncake.failures import FailureLog
from hicache_mooncake.metrics.rank import BackendMetrics
from hicache_mooncake.object_split import chunk_count, chunk_keys, chunked, split_pages, whole
from hicache_mooncake.sglang_adapter.hit_policy import BLOCK_GROUPS, HitResult, PoolQuery, evaluate
from hicache_mooncake.sglang_adapter.host_pool_views import HostRangeError
from hicache_mooncake.sglang_adapter.host_pools import HostPoolSet, RegisteredPool
from hicache_mooncake.sglang_adapter.host_pools.names import pool_name
from hicache_mooncake.tiers.parts import pages_nbytes
from hicache_mooncake.tiers.policy.base import TRAILING_TYPES
from hicache_mooncake.tiers.policy.hints import session_of

log = logging.getLogger(__name__)


class SidecarIO:
    def __init__(
        self,
        store: Any,
        host_pools: HostPoolSet,
        failures: FailureLog,
        metrics: BackendMetrics,
        *,
        is_storage_writer: bool,
        max_batch_pages: int,
        max_object_bytes: int,
    ) -> None:
        self.store = store
        self.host_pools = host_pools
        self.failures = failures
        self.metrics = metrics
        self.is_storage_writer = is_storage_writer
        self.max_batch_pages = max_batch_pages
        self.max_object_bytes = max_object_bytes

    # ------------------------------------------------------------------ existence
    def exists(self, keys: list[str], transfers: Sequence[Any], kv_pages: int) -> HitResult:
        """Per-pool hits of a span whose KV prefix is ``kv_pages`` (see ``hit_policy``)."""
        queries: list[PoolQuery] = []
        for t in transfers:
            name = pool_name(t.name)
            policy = str(getattr(t.hit_policy, "value", t.hit_policy))
            span = len(keys) if policy == BLOCK_GROUPS else kv_pages
            present = self._present(name, keys[:span])
            queries.append(
                PoolQuery(
                    name=name,
                    policy=policy,
                    present=present,
                    window=len(t.keys) if t.keys else 1,
                    block_pages=int(getattr(t, "block_pages", 0) or 0),
                    group_pages=int(getattr(t, "group_pages", 0) or 0),
                )
            )
        return evaluate(kv_pages, queries)

    def _present(self, name: str, page_hashes: list[str]) -> list[bool]:
        """Whether each page has ``name``'s object(s); all False for an unknown pool."""
        pool = self.host_pools.get(name)
        if pool is None or pool.keys is None:
            self.failures.record(f"batch_exists_v2 for unregistered pool {name!r}: misses")
            return [False] * len(page_hashes)
        if not pool.holds_bytes or not page_hashes:
            return [True] * len(page_hashes)
        count = chunk_count(pool.page_nbytes, self.max_object_bytes)
        flat = chunked(pool.keys.keys(page_hashes), count)
        step = self.max_batch_pages
        found = [
            ok for i in range(0, len(flat), step) for ok in self.store.contains_batch(flat[i : i + step])
        ]
        return whole(found, count)

    # ------------------------------------------------------------------ data
    def get(self, transfers: Sequence[Any], extra_info: Any) -> dict[Any, list[bool]]:
        return {t.name: self._transfer("get", t, extra_info) for t in transfers}

    def set(self, transfers: Sequence[Any], extra_info: Any) -> dict[Any, list[bool]]:
        return {t.name: self._transfer("set", t, extra_info) for t in transfers}

    def _transfer(self, op: str, transfer: Any, extra_info: Any) -> list[bool]:
        name = pool_name(transfer.name)
        page_hashes = list(transfer.keys or [])
        if not page_hashes:
            return []
        pool = self.host_pools.get(name)
        if pool is None or pool.keys is None:
            self.failures.record(f"batch_{op}_v2 for unregistered pool {name!r}: misses")
            return [False] * len(page_hashes)
        if op == "set" and not self.is_storage_writer and not pool.rank_sharded:
            return [True] * len(page_hashes)  # replicated: the writer rank stores the one copy
        try:
            if transfer.host_indices is None:
                raise HostRangeError("transfer without host indices")
            parts = pool.page_parts(transfer.host_indices, len(page_hashes))
            if not pool.holds_bytes:
                return [True] * len(page_hashes)
            start = time.perf_counter()
            ok = self._move(op, pool, page_hashes, parts, extra_info)
        except HostRangeError as exc:
            self.failures.record(f"batch_{op}_v2 refused host indices of pool {name!r}: {exc.reason}")
            log.debug("batch_%s_v2 of pool %s: %s", op, name, exc)
            return [False] * len(page_hashes)
        except Exception as exc:
            self.failures.record(f"batch_{op}_v2 of pool {name!r} failed", exc)
            self.metrics.failures.labels(f"sidecar_{op}").inc()
            return [False] * len(page_hashes)
        nbytes = pages_nbytes(parts, ok)
        self.metrics.record(f"sidecar_{op}", sum(ok), len(ok) - sum(ok), nbytes, time.perf_counter() - start)
        return ok

    def _move(
        self, op: str, pool: RegisteredPool, page_hashes: list[str], parts: list[list[Any]], extra_info: Any
    ) -> list[bool]:
        """Store or load the pages in batches of ``max_batch_pages`` (SGLang hands KV-derived
        sidecars a whole operation at once); a page is done when all its chunks are."""
        assert pool.keys is not None
        count = chunk_count(pool.page_nbytes, self.max_object_bytes)
        prefix = getattr(extra_info, "prefix_keys", None)
        prefix = (
            list(prefix) if isinstance(prefix, list) and all(isinstance(k, str) for k in prefix) else None
        )
        ok: list[bool] = []
        session = session_of(extra_info) if op == "set" else None  # SGLang passes it on v2 sets
        step = max(1, self.max_batch_pages // count)
        for start in range(0, len(page_hashes), step):
            hashes = page_hashes[start : start + step]
            keys = chunked(pool.keys.keys(hashes), count)
            chunks = split_pages(parts[start : start + step], count)
            if op == "set":
                if session is not None:
                    self.store.hints.attach(session, keys)
                chain = (prefix or []) + page_hashes[:start]
                prev = chunk_keys(pool.keys.key(chain[-1]), count)[-1] if chain else None
                done = self.store.put_batch(
                    keys,
                    chunks,
                    prev,
                    len(chain) * count if prefix is not None else None,  # in objects
                    obj_type=pool.obj_type,
                    supersedes=self._superseded(pool, prefix, count) if start == 0 else (),
                )
            else:
                done = self.store.get_batch_into(keys, chunks, obj_type=pool.obj_type)
            ok.extend(whole(done, count))
            if op == "get" and not ok[-1]:  # SGLang uses the leading run only
                ok.extend([False] * (len(page_hashes) - len(ok)))
                break
        return ok

    @staticmethod
    def _superseded(pool: RegisteredPool, prefix: list[str] | None, count: int) -> list[str]:
        """A trailing pool's objects for the pages before this transfer's (SGLang sends a
        trailing transfer's window with ``prefix_keys`` up to it): stale once this one is stored.
        Without prefix keys the chain is unknown and nothing is superseded."""
        if pool.obj_type not in TRAILING_TYPES or not prefix:
            return []
        assert pool.keys is not None
        return chunked(pool.keys.keys(prefix), count)
