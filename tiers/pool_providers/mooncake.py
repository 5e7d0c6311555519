"""``mooncake``: the pool is a Mooncake Store cluster (master + clients contributing DRAM segments,
Transfer Engine over TCP or RDMA, replicas, master HA), through the ``mooncake.store`` client.

Data path (zero copy): SGLang's host-pool buffers are registered once (``register_buffer``) when
the backend announces them (``register_memory``); a page is ONE Mooncake object written and read
with ``batch_put_from_multi_buffers`` / ``batch_get_into_multi_buffers`` straight from and into
the pool, one pointer per part (K and V, or every layer's runs). A page with a part outside the
registered buffers (SGLang's legacy non-v1 path hands over freshly made tensors) is *staged*:
``put_parts`` copies it through Mooncake's own registered ``local_buffer_size`` buffer, and a get
lands in that buffer (``get_buffer``) and is copied out with numpy; counted as ``staged_*``.
Existence is one ``batch_is_exist`` per call.

Failure semantics: per-key failures are False (``OBJECT_NOT_FOUND``, a transfer to a dead segment
holder, a size mismatch); a call whose every key failed with ``RPC_FAIL``/``RPC_TIMEOUT`` (master
gone) raises ``PoolUnavailable``. Calls may block inside native code (a dead master costs each call
seconds), so the provider is ``blocking``: the tier runs it under its ``CallGuard`` deadline and,
while the master is away, answers misses without calling. Mooncake's client pings the master,
reconnects, remounts its segments and follows the elected leader in HA mode by itself; ``probe()``
only checks that it did (and connects the first time, if the master was not up at start).
``setup`` and ``close`` hold the GIL while they wait for a master, so they are only called when
``mooncake_reach`` finds one accepting connections (else: retry later / leave the client unclosed);
a client of an HA master is never closed (its ``close`` waits up to 30 s for its leader watch).

``clear()`` does not wipe the pool: a Mooncake cluster is shared by every deployment and instance
(``remove_all`` would delete their pages too); objects leave it by Mooncake's eviction.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from hicache_mooncake.native import copy_slots

from .base import Item, PoolProvider, PoolUnavailable, RemoteSettings
from .mooncake_config import MooncakeConfig
from .mooncake_reach import metadata_reachable, reachable_master
from .registered import RegisteredRanges, address_of
from .registry import register_provider

log = logging.getLogger(__name__)

OBJECT_ALREADY_EXISTS = -705
UNREACHABLE = frozenset({-900, -901})  # RPC_FAIL, RPC_TIMEOUT: the master did not answer
PROBE_KEY = "hicache-mooncake/probe"
# Clients whose ``close()`` would hold the GIL for seconds: kept here, unclosed, for the life of the
# process (the wheel's exit handler tears them down at exit).
_PARKED: list[Any] = []


class MooncakeProvider(PoolProvider):
    name = "mooncake"
    blocking = True

    def __init__(self, cfg: MooncakeConfig, timeout_s: float) -> None:
        self.cfg = cfg
        self.timeout_s = timeout_s
        self.retry_interval_s = cfg.retry_interval_s
        self._store: Any = None
        self._replicate: Any = None
        self._connect_lock = threading.Lock()
        self._memory_lock = threading.Lock()  # announced regions, registrations, the store's arrival
        self._announced = RegisteredRanges()  # what the caller announced
        self._registered = RegisteredRanges()  # what the live store accepted: zero copy
        self._closed = False
        self.counters: Counter[str] = Counter()
        self.last_error = ""
        _rpc_timeouts_below(min(self.deadline_s("put", timeout_s), self.deadline_s("get", timeout_s)))

    # ------------------------------------------------------------------ connection
    def deadline_s(self, op: str, default: float) -> float:
        if op == "put" and self.cfg.put_timeout_s is not None:
            return self.cfg.put_timeout_s
        if op in ("get", "exists") and self.cfg.get_timeout_s is not None:
            return self.cfg.get_timeout_s
        return default

    def setup_config(self) -> dict[str, Any]:
        """What ``MooncakeDistributedStore.setup`` receives (its dict form)."""
        c = self.cfg
        return {
            "local_hostname": c.local_hostname,
            "metadata_server": c.metadata_server,
            "global_segment_size": c.segment_size,
            "local_buffer_size": c.local_buffer_size,
            "protocol": c.protocol,
            "rdma_devices": c.device_names,
            "master_server_addr": c.master,
        }

    def connect(self) -> bool:
        """Set the client up once (True when connected). Concurrent callers do not wait: one
        connects, the others get False."""
        if self._store is not None:
            return True
        if self._closed or not self._connect_lock.acquire(blocking=False):
            return False
        try:
            if self._store is not None:
                return True
            wait_s = min(1.0, self.timeout_s)
            if reachable_master(self.cfg.master, wait_s) is None:
                self.last_error = f"no master accepting connections at {self.cfg.master}"
                self.counters["master_unreachable"] += 1
                return False  # setup() would hold the GIL while it waits: see mooncake_reach
            if not metadata_reachable(self.cfg.metadata_server, wait_s):
                self.last_error = f"metadata server {self.cfg.metadata_server} not reachable"
                self.counters["metadata_unreachable"] += 1
                return False
            from mooncake.store import MooncakeDistributedStore, ReplicateConfig

            store = MooncakeDistributedStore()
            rc = store.setup(self.setup_config())
            if rc != 0:
                self.last_error = f"setup returned {rc} (master {self.cfg.master})"
                self.counters["setup_failures"] += 1
                with contextlib.suppress(Exception):
                    store.close()
                return False
            replicate = ReplicateConfig()
            replicate.replica_num = self.cfg.replica_num
            self._replicate = replicate
            with self._memory_lock:
                for base, nbytes in self._announced.ranges():
                    self._register(store, base, nbytes)
                self._store = store
            self.counters["connects"] += 1
            log.info("hicache-mooncake: connected to Mooncake master %s", self.cfg.master)
            return True
        finally:
            self._connect_lock.release()

    def _register(self, store: Any, base: int, nbytes: int) -> None:
        rc = store.register_buffer(base, nbytes)
        if rc == 0:
            self._registered.add(base, nbytes)
        else:  # pages in it take the staged path (still correct)
            self.counters["register_failures"] += 1
            self.last_error = f"register_buffer({nbytes} bytes) returned {rc}"

    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """Announce the host pool's buffers; registered now if connected, else at connection."""
        with self._memory_lock:
            for view in regions:
                base, nbytes = address_of(view), view.nbytes
                if nbytes and self._announced.add(base, nbytes) and self._store is not None:
                    self._register(self._store, base, nbytes)

    def probe(self) -> bool:
        if self._store is None:
            return self.connect()
        code = self._store.batch_is_exist([PROBE_KEY])[0]
        return code not in UNREACHABLE and code >= 0

    def _live(self) -> Any:
        store = self._store
        if store is None:
            raise PoolUnavailable(f"not connected to the Mooncake master {self.cfg.master}")
        return store

    def _check(self, op: str, codes: Sequence[int]) -> None:
        """Count error codes; all keys failing with RPC errors means the master is gone."""
        bad = [c for c in codes if c < 0]
        for c in bad:
            self.counters[f"{op}_rc_{c}"] += 1
        if codes and len(bad) == len(codes) and all(c in UNREACHABLE for c in bad):
            raise PoolUnavailable(f"Mooncake master {self.cfg.master} unreachable ({op} rc {bad[0]})")

    def _split(self, items: Sequence[Item]) -> tuple[list[int], list[list[int]], list[list[int]], list[int]]:
        """Items whose parts all lie in registered memory (with their addresses and sizes), and
        the indices of the others (staged)."""
        direct: list[int] = []
        ptrs: list[list[int]] = []
        sizes: list[list[int]] = []
        staged: list[int] = []
        registered = self._registered
        for i, (_key, parts) in enumerate(items):
            addrs = [address_of(p) for p in parts]
            ns = [p.nbytes for p in parts]
            if registered.covers_all(addrs, ns):
                direct.append(i)
                ptrs.append(addrs)
                sizes.append(ns)
            else:
                staged.append(i)
        return direct, ptrs, sizes, staged

    # ------------------------------------------------------------------ data path
    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        codes = self._live().batch_is_exist(list(keys))
        self._check("exists", codes)
        return [c == 1 for c in codes]

    def put_batch(self, items: Sequence[Item], obj_type: int) -> list[bool]:
        store = self._live()
        out = [False] * len(items)
        direct, ptrs, sizes, staged = self._split(items)
        if direct:
            keys = [items[i][0] for i in direct]
            codes = store.batch_put_from_multi_buffers(keys, ptrs, sizes, self._replicate)
            self._check("put", codes)
            for i, c in zip(direct, codes, strict=True):
                out[i] = c == 0 or c == OBJECT_ALREADY_EXISTS
            self.counters["direct_puts"] += len(direct)
        for i in staged:
            key, parts = items[i]
            c = store.put_parts(key, *parts, config=self._replicate)
            self._check("put", [c])
            out[i] = c == 0 or c == OBJECT_ALREADY_EXISTS
            self.counters["staged_puts"] += 1
        return out

    def get_batch_into(self, items: Sequence[Item]) -> list[bool]:
        store = self._live()
        out = [False] * len(items)
        direct, ptrs, sizes, staged = self._split(items)
        if direct:
            keys = [items[i][0] for i in direct]
            got = store.batch_get_into_multi_buffers(keys, ptrs, sizes)
            self._check("get", got)
            for i, n, ns in zip(direct, got, sizes, strict=True):
                out[i] = n == sum(ns)
            self.counters["direct_gets"] += len(direct)
        if staged:
            handles = store.batch_get_buffer([items[i][0] for i in staged])
            for i, handle in zip(staged, handles, strict=True):
                out[i] = _copy_out(handle, items[i][1])
            self.counters["staged_gets"] += len(staged)
        return out

    def remove_batch(self, keys: Sequence[str]) -> list[bool]:
        codes = self._live().batch_remove(list(keys))
        self._check("remove", codes)
        return [c == 0 for c in codes]

    def clear(self) -> None:
        self.counters["clear_skipped"] += 1  # shared pool: see the module docstring

    def stats(self) -> dict[str, Any]:
        return {
            "connected": self._store is not None,
            "master": self.cfg.master,
            "replica_num": self.cfg.replica_num,
            "segment_bytes": self.cfg.segment_size,
            "registered_bytes": self._registered.total_bytes(),
            "last_error": self.last_error,
            "client": dict(self.counters),
        }

    def close(self) -> None:
        self._closed = True
        store, self._store = self._store, None
        if store is None:
            return
        if self.cfg.master.startswith("etcd://"):
            # HA: the client's destructor joins its leader watch, which waits up to 30 s for a
            # view change, with the GIL held (SGLang frozen that long at a detach)
            _PARKED.append(store)
            log.info("hicache-mooncake: Mooncake client (HA master) left open until the process exits")
            return
        if reachable_master(self.cfg.master, min(1.0, self.timeout_s)) is None:
            _PARKED.append(store)  # close() would freeze the process while it waits for the master
            log.warning("hicache-mooncake: Mooncake master unreachable at close; client left unclosed")
            return
        with self._memory_lock:
            for base, _ in self._registered.ranges():
                with contextlib.suppress(Exception):
                    store.unregister_buffer(base)
            self._registered.clear()
        with contextlib.suppress(Exception):
            store.close()


def _copy_out(handle: Any, parts: Sequence[memoryview]) -> bool:
    """Copy an object held in Mooncake's local buffer into ``parts`` (the staged get)."""
    if handle is None:
        return False
    total = sum(p.nbytes for p in parts)
    if handle.size() != total:
        return False
    src = np.ctypeslib.as_array((ctypes.c_ubyte * total).from_address(handle.ptr()))
    copy_slots(src, [0], [parts], False)
    return True


def _rpc_timeouts_below(deadline_s: float) -> None:
    """Let Mooncake's master RPCs give up by themselves well inside our deadline (unless the
    operator set them): fewer calls outlive it. Process-wide, read by clients made after this."""
    ms = max(100, int(deadline_s * 500))
    os.environ.setdefault("MC_RPC_TIMEOUT_MS", str(ms))
    os.environ.setdefault("MC_RPC_CONNECT_TIMEOUT_MS", str(max(100, ms // 2)))


@register_provider("mooncake")
def build_mooncake(remote: RemoteSettings, metadata: Any) -> MooncakeProvider:
    return MooncakeProvider(remote.mooncake, remote.timeout_s)
