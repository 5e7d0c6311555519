"""``HiCacheMooncakeBackend``: the ``HiCacheStorage`` subclass SGLang loads by name.

SGLang constructs it as ``HiCacheMooncakeBackend(storage_config, {})`` through its ``dynamic``
loader (``module_path: hicache_mooncake.backend``), then calls ``register_mem_pool_host``. With
``interface_v1: 1`` pages move zero-copy between SGLang's host pool and our tiers
(``batch_get_v1``/``batch_set_v1``); otherwise SGLang copies flat pages through ``batch_get``/``batch_set``.
Hybrid models' sidecar pools (Mamba state, sliding window, indexer, DeepSeek V4 pools) arrive through
``register_mem_host_pool_v2`` and move through the v2 calls (``sglang_adapter/hybrid.py``).

Promises to SGLang:
- a bad configuration raises ``ConfigError`` from the constructor (the attach fails with the
  message); nothing was allocated;
- data-path calls never raise: a failure is a miss / False, counted, logged once per cause;
- a page is one object (K and V, or every layer's parts, together), namespaced by model, layout
  (of every registered pool) and rank (``keys.py``), so incompatible runs never read each other's bytes;
- host indices are checked against the registered pool before any pointer is made: a count that
  is not ``keys x page_size`` or an index outside the pool is a miss / False, logged once;
- a page key that is not a string of 1..512 characters (``keys.page_key_ok``) is a miss / a
  refused set of its own (False for that key, counted and logged once per cause); the rest of its
  batch is served (``batch_exists`` counts the pages before it);
- with a rank-replicated KV (MLA), only the storage writer (TP rank 0) stores; every rank reads
  (``tiers.host_cache: auto`` puts every rank's tiers in the host cache, so they find its pages);
- ``close()`` releases every buffer, thread, socket and file, is idempotent and never raises;
  every call after it is a miss / False.

With ``admin.port`` set, each rank serves its admin endpoint (``hicache_mooncake.admin``: per-tier
operations at runtime on this backend's store). A call whose ``extra_info`` names a tenant
(``keys.request_tenant``) uses that tenant's keys; otherwise ``namespace.tenant``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from hicache_mooncake.sglang_adapter.compat import check_sglang_version, config_field
from hicache_mooncake.tiers.policy.hints import session_of

SGLANG_VERSION = check_sglang_version()

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: E402

from hicache_mooncake import logs  # noqa: E402
from hicache_mooncake.checks.environment import check_at_attach  # noqa: E402
from hicache_mooncake.config import BackendConfig, load_backend_config  # noqa: E402
from hicache_mooncake.config.tenants import check_tenant_name  # noqa: E402
from hicache_mooncake.failures import FailureLog  # noqa: E402
from hicache_mooncake.host_cache.mode import use_host_cache  # noqa: E402
from hicache_mooncake.keys import (  # noqa: E402
    PAGE_KEY_RULE,
    KeySpace,
    RankInfo,
    bad_page_keys,
    page_key_ok,
    request_tenant,
)
from hicache_mooncake.kv_events.attach import start_backend_publisher  # noqa: E402
from hicache_mooncake.kv_events.publisher import KvEventPublisher  # noqa: E402
from hicache_mooncake.metrics.rank import BackendMetrics, backend_labels  # noqa: E402
from hicache_mooncake.object_split import (  # noqa: E402
    PageCut,
    chunk_count,
    max_object_bytes,
    whole,
)
from hicache_mooncake.sglang_adapter.cross_tp import HeadGroupPages, group_suffixes, head_groups_for  # noqa: E402
from hicache_mooncake.sglang_adapter.host_pool_views import HostRangeError  # noqa: E402
from hicache_mooncake.sglang_adapter.host_pools import HostPoolSet, RegisteredPool  # noqa: E402
from hicache_mooncake.sglang_adapter.host_pools.names import KV, pool_name  # noqa: E402
from hicache_mooncake.sglang_adapter.hybrid import SidecarIO  # noqa: E402
from hicache_mooncake.sglang_adapter.settings_check import log_differences  # noqa: E402
from hicache_mooncake.store_builder import build_client_store  # noqa: E402
from hicache_mooncake.tiers.parts import pages_nbytes  # noqa: E402

log = logging.getLogger(__name__)
T = TypeVar("T")


class HiCacheMooncakeBackend(HiCacheStorage):
    def __init__(self, storage_config: Any, kwargs: dict[str, Any] | None = None) -> None:
        extra = dict(config_field(storage_config, "extra_config", {}) or {})
        self.config: BackendConfig = load_backend_config(extra)
        logs.configure(self.config.log_level)
        is_mla = bool(config_field(storage_config, "is_mla_model", False))
        tp_rank = int(config_field(storage_config, "tp_rank", 0))
        writer = getattr(storage_config, "is_storage_writer", None)
        self.is_storage_writer = bool(writer) if writer is not None else (not is_mla or tp_rank == 0)
        self.ranks = RankInfo(
            tp_rank=tp_rank,
            tp_size=int(config_field(storage_config, "tp_size", 1)),
            pp_rank=int(config_field(storage_config, "pp_rank", 0)),
            pp_size=int(config_field(storage_config, "pp_size", 1)),
            cp_rank=int(config_field(storage_config, "attn_cp_rank", 0)),
            cp_size=int(config_field(storage_config, "attn_cp_size", 1)),
            dcp_rank=int(config_field(storage_config, "dcp_rank", 0)),
            dcp_size=int(config_field(storage_config, "dcp_size", 1)),
            replicated_kv=is_mla,
        )
        check_at_attach(self.config, self.ranks.tp_size * self.ranks.pp_size)  # SSD dirs, shm: this host
        self.model_name = (
            self.config.namespace.model or config_field(storage_config, "model_name", "") or "model"
        )
        tp_lcm = config_field(storage_config, "tp_lcm_size", None) or extra.get("tp_lcm_size")
        groups = head_groups_for(tp_lcm, self.ranks.tp_size, is_mla, bool(self.config.interface_v1))
        self.ranks = dataclasses.replace(self.ranks, head_groups=groups)  # cross_tp.py: KV keys, digest
        self._head_groups: HeadGroupPages | None = None  # set when the KV host pool registers
        if groups:
            log.info(
                "tp_lcm_size=%d: MHA pages are stored as %d head-group objects; this rank (TP %d of %d) "
                "holds %s, shared with every TP size that divides %d",
                groups, groups, self.ranks.tp_rank, self.ranks.tp_size,
                ",".join(group_suffixes(groups, self.ranks.tp_rank, self.ranks.tp_size)), groups,
            )  # fmt: skip
        elif tp_lcm and is_mla:
            log.info(
                "tp_lcm_size=%s: the KV is rank-replicated (MLA): pages are shared across TP sizes as is",
                tp_lcm,
            )
        self.io_path = "v1" if self.config.interface_v1 else "flat"
        self.mem_pool_host: Any = None
        self.host_pools = HostPoolSet(self.model_name, self.config.namespace.tenant, self.io_path, self.ranks)
        self._failures = FailureLog()
        self._closed = False
        self._close_lock = threading.Lock()
        dp_rank = int(config_field(storage_config, "dp_rank", 0))
        r = self.ranks
        self.rank_tag = f"rank{r.tp_rank}_{r.pp_rank}_{r.cp_rank}_{dp_rank}"
        self.host_cache, why = use_host_cache(self.config, is_mla, self.ranks.tp_size)
        self.store = build_client_store(self.config, self.rank_tag, self.host_cache)
        self.metrics = BackendMetrics(
            self.store.stats, backend_labels(self.model_name, r, dp_rank, SGLANG_VERSION)
        )
        self.metrics.instrument(self.store.tiers)
        self._max_object_bytes = max_object_bytes(self.config)
        self._kv_page_cut: tuple[RegisteredPool, PageCut] | None = None  # _kv_cut's (pool, cut)
        self.sidecars = SidecarIO(
            self.store,
            self.host_pools,
            self._failures,
            self.metrics,
            is_storage_writer=self.is_storage_writer,
            max_batch_pages=self.config.io.max_batch_pages,
            max_object_bytes=self._max_object_bytes,
        )
        self.admin: Any = None
        self.admin_error: str | None = None  # why the admin endpoint did not start (not fatal)
        self.metrics_port: int | None = None
        if self.config.metrics.port is not None:
            try:
                self.metrics_port = self.metrics.serve(self.config.metrics, self._health)
            except OSError as exc:
                self.store.close()
                raise RuntimeError(str(exc)) from exc
            log.info(
                "hicache-mooncake metrics: http://%s:%d/metrics", self.config.metrics.host, self.metrics_port
            )
        if self.config.admin.port is not None:
            self._start_admin(dp_rank)
        self.events: KvEventPublisher | None = None
        try:
            self.events = start_backend_publisher(self.config.events, self.store, r, dp_rank, self.host_cache)
        except ValueError as exc:  # the endpoint cannot be bound: release what was built
            self.close()
            raise RuntimeError(str(exc)) from exc
        if is_mla and self.ranks.tp_size > 1 and not self.host_cache and not self.config.tiers.remote.enabled:
            log.warning(
                "MLA with tp_size=%d and %s: only TP rank 0 stores, and no tier is shared between rank "
                "processes, so ranks != 0 will miss (and SGLang's MIN-reduce makes every rank miss). "
                "Set tiers.host_cache: auto (the default) or on.",
                self.ranks.tp_size,
                why,
            )
        log.info(
            "hicache-mooncake backend: model=%s ranks=%s writer=%s tiers=%s (%s) sglang=%s",
            self.model_name,
            self.ranks.suffix() or "(replicated)",
            self.is_storage_writer,
            [t.name for t in self.store.tiers],
            why,
            SGLANG_VERSION,
        )

    def _start_admin(self, dp_rank: int) -> None:
        """The admin endpoint of this rank. A refusal the operator's YAML causes (no token off
        loopback, an unreadable token file, a fixed port taken) fails the attach with the key,
        after releasing what was built; one another local user can cause (an unsafe generated-token
        directory) or no free port with ``admin.port: 0`` does not (``start_failure_fatal``): the
        backend runs without its endpoint (``admin_error``) and logs one ERROR with the fix."""
        from hicache_mooncake.admin.layout import backend_layout
        from hicache_mooncake.admin.routes import AdminContext
        from hicache_mooncake.admin.server import (
            AdminServer,
            rank_index,
            start_failure_fatal,
            unavailable_message,
        )
        from hicache_mooncake.admin.tier_factory import TierFactory
        from hicache_mooncake.host_cache.admin_endpoint import client_labels

        r = self.ranks
        index = rank_index(r.tp_rank, r.tp_size, r.pp_rank, r.pp_size, dp_rank)
        context = AdminContext(
            store=self.store,
            factory=TierFactory(self.config, self.rank_tag),
            labels={
                "model": self.model_name,
                "rank": str(index),
                **client_labels(self.config, self.host_cache),  # host-cache mode: for the CLI's routing
            },
            timeout_s=self.config.admin.operation_timeout_s,
            store_keys=self._store_keys,
            layout=lambda: backend_layout(self),
        )
        server = AdminServer(self.config.admin, context, index)
        try:
            server.start()
        except Exception as exc:
            if not start_failure_fatal(self.config.admin, exc):
                server.close()
                self.admin_error = str(exc)
                log.error("%s", unavailable_message(self.config.admin, exc))
                return
            self.metrics.close()
            self.store.close()
            raise RuntimeError(
                f"admin.port {self.config.admin.port} on {self.config.admin.host}: {exc}"
            ) from exc
        self.admin = server

    def _store_keys(self, page_hashes: list[str], tenant: str | None = None) -> list[str]:
        """The store's keys of SGLang page hashes (for admin routes such as hints). ValueError
        until the key space is fixed (SGLang's registration burst is over, or its first data
        call): an admin request must not fix it early, before every pool joined its digest."""
        kv = self.host_pools.kv
        space = kv.keys if kv is not None and self.host_pools.final else None
        if space is None:
            raise ValueError("SGLang has not registered its host pools yet: no key space")
        owner = space.for_tenant(check_tenant_name(tenant)) if tenant is not None else space
        return self._kv_cut().keys(owner.keys(page_hashes))

    def _space_for(self, space: KeySpace, extra_info: Any) -> KeySpace:
        """The key space of a call: the tenant it names (``request_tenant``), else the backend's."""
        tenant = request_tenant(extra_info)
        if tenant is None:
            return space
        try:
            return space.for_tenant(check_tenant_name(tenant))
        except ValueError as exc:
            self._failures.record("a call named an invalid tenant: the backend's tenant is used", exc)
            return space

    # ------------------------------------------------------------------ registration
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        log_differences(self.config.sglang, mem_pool_host)  # the YAML's sglang: vs what SGLang runs
        if self.ranks.head_groups:  # ConfigError: a pool that cannot be cut by heads fails the attach
            self._head_groups = HeadGroupPages.of(mem_pool_host, self.ranks.head_groups, self.ranks.tp_size)
        self._register(KV, mem_pool_host)
        if self.events is not None:  # BlockStored.block_size: tokens per page
            self.events.block_size = int(getattr(mem_pool_host, "page_size", 0) or 0)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        if pool_name(host_pool_name) == KV and self.host_pools.kv is not None:
            return  # the anchor, registered by register_mem_pool_host
        self._register(host_pool_name, host_pool)

    def on_host_pools_registered(self) -> None:
        """The burst is over: fix the key space now (the model digest covers every pool)."""
        if self.host_pools.finalize():
            kv = self.host_pools.kv
            log.info(
                "hicache-mooncake: pools %s registered, key prefix %s",
                self.host_pools.names(),
                kv.keys.prefix if kv is not None and kv.keys is not None else "?",
            )

    def _register(self, name: Any, pool: Any) -> None:
        try:
            regions = self.host_pools.register(name, pool)
        except Exception as exc:
            self._failures.record(
                f"host pool {pool_name(name)!r} ({type(pool).__name__}) not usable: misses", exc
            )
            return
        if regions:
            self.store.register_memory(regions)

    # ------------------------------------------------------------------ helpers
    def _ready(self, op: str, count: int) -> KeySpace | None:
        if self._closed:
            return None
        kv = self.host_pools.kv
        if kv is None or not self.host_pools.finalize():
            self._failures.record(f"{op} before register_mem_pool_host")
            return None
        if count > self.config.io.max_batch_pages:
            self._failures.record(f"{op} of {count} pages exceeds io.max_batch_pages")
            return None
        return kv.keys

    @staticmethod
    def _prev_key(keys: KeySpace, extra_info: Any) -> str | None:
        prefix = getattr(extra_info, "prefix_keys", None)
        if isinstance(prefix, list) and prefix and page_key_ok(prefix[-1]):
            return keys.key(prefix[-1])
        return None

    def _valid_keys(self, op: str, keys: Sequence[Any]) -> list[bool] | None:
        """None when ``KeySpace.key`` accepts every key (the usual call: C-level passes);
        otherwise which keys it accepts. Each refused key is counted under one cause per call
        kind (``FailureLog``: logged once per interval); the caller makes it a miss / a refused
        set of its own and serves the rest of the batch."""
        bad = bad_page_keys(keys)
        if not bad:
            return None
        for _ in bad:
            self._failures.record(f"{op}: {PAGE_KEY_RULE}; each other one is a miss / not stored")
        ok = [True] * len(keys)
        for i in bad:
            ok[i] = False
        return ok

    @property
    def _keys(self) -> KeySpace | None:
        """The KV pool's key space (None before ``register_mem_pool_host``)."""
        kv = self.host_pools.kv
        return kv.keys if kv is not None and self.host_pools.finalize() else None

    def _kv_pool(self) -> RegisteredPool:
        kv = self.host_pools.kv
        assert kv is not None
        return kv

    def _kv_chunks(self) -> int:
        """Chunks per KV object: 1, unless an object is larger than some local tier accepts."""
        return self._kv_cut().count

    def _kv_cut(self) -> PageCut:
        """How a KV page becomes objects: one object, or this rank's head groups (``cross_tp``),
        each in chunks when larger than some local tier accepts (``object_split``), as a sidecar
        page is (logged once)."""
        kv = self.host_pools.kv
        groups = group_suffixes(self.ranks.head_groups, self.ranks.tp_rank, self.ranks.tp_size)
        if kv is None:
            return PageCut(1, groups)
        cached = self._kv_page_cut
        if cached is not None and cached[0] is kv:
            return cached[1]
        object_bytes = kv.page_nbytes // max(1, len(groups))
        count = chunk_count(object_bytes, self._max_object_bytes)
        cut = PageCut(count, groups)
        self._kv_page_cut = (kv, cut)
        if count > 1:
            log.info(
                "hicache-mooncake: a KV %s (%d bytes) is larger than a local tier's largest "
                "object (%d bytes): each page is stored as %d objects",
                "head group" if groups else "page", object_bytes, self._max_object_bytes, cut.per_page,
            )  # fmt: skip
        return cut

    def _v1_parts(
        self, keys: Sequence[str], host_indices: Any, reading: bool = False
    ) -> tuple[list[list[memoryview]], Callable[[Sequence[bool]], None]]:
        """Each page's byte views, and what to run on the per-page results: with head groups
        (``cross_tp``) a get into a staging buffer then writes the pages read into the pool."""
        kv = self._kv_pool()
        if not self.ranks.head_groups or not kv.holds_bytes:
            return kv.page_parts(host_indices, len(keys)), _no_finish
        groups = self._head_groups
        if groups is None:  # the KV pool came through register_mem_host_pool_v2 alone
            groups = self._head_groups = HeadGroupPages.of(
                kv.pool, self.ranks.head_groups, self.ranks.tp_size
            )
        pages = groups.page_numbers(kv.check_indices(host_indices, len(keys)), len(keys)).tolist()
        if reading:
            return groups.get_parts(pages)
        return groups.set_parts(pages), _no_finish

    # ------------------------------------------------------------------ zero-copy path
    def _guarded(self, op: str, count: int, miss: T, call: Callable[[KeySpace], T], metric: str = "") -> T:
        """Run one data-path call of ``count`` pages on the KV key space; it never raises. Not
        ready (closed, no host pool, over ``io.max_batch_pages``) -> ``miss``; host indices outside
        the pool -> ``miss``, the cause recorded; any other exception -> ``miss``, recorded and
        counted under ``failures_total{op=metric}`` where a metric is named."""
        space = self._ready(op, count)
        if space is None:
            return miss
        try:
            return call(space)
        except HostRangeError as exc:
            self._failures.record(f"{op} refused host indices: {exc.reason}")
            log.debug("%s: %s", op, exc)
            return miss
        except Exception as exc:
            self._failures.record(f"{op} failed", exc)
            if metric:
                self.metrics.failures.labels(metric).inc()
            return miss

    def _valid_only(
        self,
        op: str,
        keys: Sequence[str],
        parts: list[list[memoryview]],
        run: Callable[[Sequence[str], list[list[memoryview]]], list[bool]],
    ) -> list[bool]:
        """``run`` over the keys ``KeySpace.key`` accepts; a refused key's answer is ``False``."""
        valid = self._valid_keys(op, keys)
        if valid is None:
            return run(keys, parts)
        return _spread(run(_kept(keys, valid), _kept(parts, valid)), valid)

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor, extra_info: Any = None) -> list[bool]:
        if not keys:
            return []

        def call(space: KeySpace) -> list[bool]:
            if not self.is_storage_writer:
                return [True] * len(keys)  # replicated KV: the writer rank stores the one copy
            parts, _ = self._v1_parts(keys, host_indices)
            if not self._kv_pool().holds_bytes:
                return [True] * len(keys)  # a logical KV anchor: its sidecar pools hold the bytes
            page = self._kv_pool().page_nbytes
            space = self._space_for(space, extra_info)
            return self._valid_only(
                "batch_set_v1", keys, parts, lambda k, p: self._put(space, k, p, extra_info, page)
            )

        return self._guarded("batch_set_v1", len(keys), [False] * len(keys), call, "set")

    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor, extra_info: Any = None) -> list[bool]:
        if not keys:
            return []

        def call(space: KeySpace) -> list[bool]:
            parts, finish = self._v1_parts(keys, host_indices, reading=True)
            if not self._kv_pool().holds_bytes:
                return [True] * len(keys)  # a logical KV anchor: nothing to read
            page = self._kv_pool().page_nbytes
            space = self._space_for(space, extra_info)
            done = self._valid_only("batch_get_v1", keys, parts, lambda k, p: self._get(space, k, p, page))
            finish(done)
            return done

        return self._guarded("batch_get_v1", len(keys), [False] * len(keys), call, "get")

    def _put(
        self,
        space: KeySpace,
        keys: Sequence[str],
        parts: list[list[memoryview]],
        extra_info: Any,
        page_nbytes: int = 0,
    ) -> list[bool]:
        """Store each page's objects (``_kv_cut``: the page, its head groups, their chunks), at
        most ``io.max_batch_pages`` pages' worth of chunks per store call (the head groups of a
        page count as one page: a batch is one call); a page is stored when all its objects are.
        ``page_nbytes``: every page's size when all are of one pool (0: the parts say).
        ``keys``: hashes ``_valid_keys`` accepted (every caller serves only those)."""
        start = time.perf_counter()
        prefix = getattr(extra_info, "prefix_keys", None)
        prefix_len = len(prefix) if isinstance(prefix, list) else None
        cut = self._kv_cut()
        per = cut.per_page
        store_keys = cut.keys(space.checked_keys(keys))
        session = session_of(extra_info)  # SGLang's per-request session id, where it passes one
        if session is not None:
            self.store.hints.attach(session, store_keys)
        prev = self._prev_key(space, extra_info)
        prev = cut.keys([prev])[-1] if prev is not None else None
        result: list[bool] = []
        step = self._chunked_step(cut.count)
        for first in range(0, len(keys), step):
            flat = store_keys[first * per : (first + step) * per]
            at = (prefix_len + first) * per if prefix_len is not None else None  # in objects
            done = self.store.put_batch(flat, cut.parts(parts[first : first + step]), prev, at)
            result.extend(whole(done, per))
            prev = flat[-1]
        self._record("set", result, parts, page_nbytes, start)
        return result

    def _get(
        self, space: KeySpace, keys: Sequence[str], parts: list[list[memoryview]], page_nbytes: int = 0
    ) -> list[bool]:
        """Read each page's objects as ``_put`` stored them; a page is read when all its objects
        are, and reading stops at the first page that is not (SGLang uses the leading run).
        ``page_nbytes`` and ``keys`` as for ``_put``."""
        start = time.perf_counter()
        cut = self._kv_cut()
        per = cut.per_page
        store_keys = cut.keys(space.checked_keys(keys))
        result: list[bool] = []
        step = self._chunked_step(cut.count)
        for first in range(0, len(keys), step):
            flat = store_keys[first * per : (first + step) * per]
            done = self.store.get_batch_into(flat, cut.parts(parts[first : first + step]))
            result.extend(whole(done, per))
            if not result[-1] and len(result) < len(keys):
                result.extend([False] * (len(keys) - len(result)))
                break
        self._record("get", result, parts, page_nbytes, start)
        return result

    def _record(
        self, op: str, result: list[bool], parts: list[list[memoryview]], page_nbytes: int, start: float
    ) -> None:
        """One call's figures: pages done and not, their bytes, its time since ``start``."""
        nbytes = page_nbytes * sum(result) if page_nbytes else pages_nbytes(parts, result)
        self.metrics.record(op, sum(result), len(result) - sum(result), nbytes, time.perf_counter() - start)

    def _chunked_step(self, count: int) -> int:
        """Pages per store call when each page (or head group) is ``count`` chunks: at most
        ``io.max_batch_pages`` chunks per call (one call for a batch of unchunked pages)."""
        return max(1, self.config.io.max_batch_pages // count)

    # ------------------------------------------------------------------ existence
    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        if not keys:
            return 0

        def call(space: KeySpace) -> int:
            leading = _leading_valid(keys, self._valid_keys("batch_exists", keys))
            return self._kv_prefix(self._space_for(space, extra_info), leading) if leading else 0

        return self._guarded("batch_exists", 0, 0, call)

    def _kv_prefix(self, space: KeySpace, keys: list[str]) -> int:
        """Leading stored KV pages, asked ``io.max_batch_pages`` at a time: SGLang 0.5.23's
        HybridCacheController asks for a whole request at once (thousands of pages). ``keys``:
        hashes ``_valid_keys`` accepted."""
        cut = self._kv_cut()
        step = self._chunked_step(cut.count)
        found = 0
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            hit = self.store.exists_prefix(cut.keys(space.checked_keys(chunk))) // cut.per_page
            found += hit
            if hit < len(chunk):
                break
        return found

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # ------------------------------------------------------------------ legacy copy path
    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        if not keys:
            return True

        def call(space: KeySpace) -> bool:
            if values is None or len(values) != len(keys):
                return False
            if not self.is_storage_writer:
                return True
            parts = [[_tensor_bytes(v)] for v in values]
            # a refused key is not stored: the others are, but the answer is False (not every page)
            return all(self._valid_only("batch_set", keys, parts, lambda k, p: self._put(space, k, p, None)))

        return self._guarded("batch_set", len(keys), False, call)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value] if value is not None else None)

    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        if not keys:
            return []

        def call(space: KeySpace) -> list[torch.Tensor | None]:
            given: list[Any] = list(target_locations) if target_locations is not None else [None] * len(keys)
            targets: list[torch.Tensor] = [
                t if t is not None else self.mem_pool_host.get_dummy_flat_data_page() for t in given
            ]
            parts = [[_tensor_bytes(t, writable=True)] for t in targets]
            ok = self._valid_only("batch_get", keys, parts, lambda k, p: self._get(space, k, p))
            return [t if hit else None for t, hit in zip(targets, ok, strict=True)]

        miss: list[torch.Tensor | None] = [None] * len(keys)
        return self._guarded("batch_get", len(keys), miss, call)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    # ------------------------------------------------------------------ hybrid (v2) pools
    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransferResult

        transfers = list(pool_transfers or [])
        if not keys:
            return _pool_result(PoolTransferResult, 0, {}, [])
        space = self._ready("batch_exists_v2", 0)
        if space is None:
            return _pool_result(PoolTransferResult, 0, {}, [])
        try:
            keys = _leading_valid(keys, self._valid_keys("batch_exists_v2", keys))
            if not keys:
                return _pool_result(PoolTransferResult, 0, {}, [])
            kv_pages = self._kv_prefix(space, keys) if self._kv_pool().holds_bytes else len(keys)
            result = self.sidecars.exists(keys, transfers, kv_pages)
        except Exception as exc:
            self._failures.record("batch_exists_v2 failed", exc)
            return _pool_result(PoolTransferResult, 0, {}, [])
        names = {pool_name(t.name): t.name for t in transfers}
        names.setdefault(KV, PoolName.KV)
        hits = {names[n]: pages for n, pages in result.pool_hits.items()}
        return _pool_result(PoolTransferResult, result.kv_hit_pages, hits, result.restorable)

    def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        return self._v2("get", transfers, extra_info)

    def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        return self._v2("set", transfers, extra_info)

    def _v2(self, op: str, transfers: Any, extra_info: Any) -> dict[Any, list[bool]]:
        transfers = list(transfers or [])
        if self._closed or self.host_pools.kv is None or not self.host_pools.finalize():
            if not self._closed:
                self._failures.record(f"batch_{op}_v2 before register_mem_pool_host")
            return {t.name: [False] * len(t.keys or []) for t in transfers}
        kept, valid = self._transfers_of_valid_keys(f"batch_{op}_v2", transfers)
        extra_info = _without_bad_prefix(extra_info)
        done = self.sidecars.get(kept, extra_info) if op == "get" else self.sidecars.set(kept, extra_info)
        for name, ok in valid.items():
            done[name] = _spread(done[name], ok) if name in done else [False] * len(ok)
        return done

    def _transfers_of_valid_keys(
        self, op: str, transfers: list[Any]
    ) -> tuple[list[Any], dict[Any, list[bool]]]:
        """``transfers`` less their refused keys (``_valid_keys``), each with the host indices of
        its kept pages, and which keys each changed transfer kept (by name). A transfer whose
        indices do not split into one equal run per key keeps no key (all False)."""
        kept: list[Any] = []
        valid: dict[Any, list[bool]] = {}
        for t in transfers:
            ok = self._valid_keys(op, list(t.keys or []))
            if ok is None:
                kept.append(t)
                continue
            valid[t.name] = ok
            indices = t.host_indices
            if indices is None or indices.dim() != 1 or len(indices) % len(ok):
                continue
            rows = indices.reshape(len(ok), -1)[torch.tensor(ok, dtype=torch.bool)].reshape(-1)
            kept.append(dataclasses.replace(t, keys=_kept(t.keys, ok), host_indices=rows))
        return kept, valid

    # ------------------------------------------------------------------ admin
    def clear(self) -> None:
        if self._closed:
            return
        try:
            self.store.clear()
        except Exception as exc:
            self._failures.record("clear failed", exc)

    def get_stats(self) -> Any:
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except ImportError:
            return None
        samples = self.metrics.drain_samples()
        return StorageMetrics(
            prefetch_pgs=[int(x) for x in samples["prefetch_pgs"]],
            backup_pgs=[int(x) for x in samples["backup_pgs"]],
            prefetch_bandwidth=samples["prefetch_bandwidth"],
            backup_bandwidth=samples["backup_bandwidth"],
        )

    def _health(self) -> tuple[bool, dict[str, Any]]:
        """``/healthz``: cheap (no tier I/O); unhealthy once closed."""
        return not self._closed, {"model": self.model_name, "rank": self.metrics.labels.rank}

    def tier_stats(self) -> dict[str, Any]:
        """Per-tier figures plus failure counts (for operators; SGLang does not call this)."""
        admin: dict[str, Any] = {"enabled": self.config.admin.port is not None}
        if self.admin is not None:
            admin["url"] = self.admin.url
        elif self.admin_error is not None:
            admin["unavailable"] = self.admin_error
        return {
            "tiers": self.store.stats(),
            "failures": self._failures.snapshot(),
            "closed": self._closed,
            "admin": admin,
        }

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        flush_s = self.config.tiers.ssd.flush_on_detach_s if self.store.ssd is not None else 0.0
        admin = self.admin
        steps = (
            ("admin", admin.close if admin is not None else lambda: None),
            ("store", lambda: self.store.close(flush_s)),
            ("events", self.events.close if self.events is not None else lambda: None),
            ("metrics", self.metrics.close),
        )
        for name, step in steps:
            try:
                step()
            except Exception as exc:
                self._failures.record(f"close step {name} failed", exc)
        self.host_pools.close()
        self.mem_pool_host = None


def _pool_result(cls: Any, kv_hit_pages: int, hits: dict[Any, int], restorable: list[int]) -> Any:
    """SGLang's ``PoolTransferResult``; releases before 0.5.23 have no ``restorable_prefix_pages``
    (their controller then reads the hit as one contiguous prefix, which ``kv_hit_pages`` is)."""
    if "restorable_prefix_pages" in getattr(cls, "__dataclass_fields__", {}):
        return cls(kv_hit_pages, hits, restorable)
    return cls(kv_hit_pages, hits)


def _no_finish(_done: Sequence[bool]) -> None:
    """Nothing to do after a call whose views are the pool's own (zero copy)."""


def _kept(items: Sequence[Any], valid: list[bool]) -> list[Any]:
    """The items whose key is valid (``_valid_keys``), in order."""
    return [item for item, ok in zip(items, valid, strict=True) if ok]


def _spread(done: list[bool], valid: list[bool]) -> list[bool]:
    """Results of the kept keys back at their positions; False (a miss, not stored) at the others."""
    results = iter(done)
    return [next(results) if ok else False for ok in valid]


def _without_bad_prefix(extra_info: Any) -> Any:
    """``extra_info`` without its ``prefix_keys`` when one of them is not a valid page key (the
    chain before the call is then unknown: its hints and supersessions are left out, the pages
    are stored all the same)."""
    prefix = getattr(extra_info, "prefix_keys", None)
    if not isinstance(prefix, list) or not bad_page_keys(prefix) or not dataclasses.is_dataclass(extra_info):
        return extra_info
    return dataclasses.replace(extra_info, prefix_keys=None)  # type: ignore[type-var]


def _leading_valid(keys: list[str], valid: list[bool] | None) -> list[str]:
    """The keys before the first refused one (an existence check counts a leading run)."""
    return keys if valid is None else keys[: valid.index(False)]


def _tensor_bytes(tensor: torch.Tensor, writable: bool = False) -> memoryview:
    """A byte view of a tensor (legacy path); a non-contiguous source is copied once."""
    flat = tensor.detach()
    if not flat.is_contiguous():
        if writable:
            raise ValueError("legacy get target must be contiguous")
        flat = flat.contiguous()
    return flat.reshape(-1).view(torch.uint8).numpy().data
