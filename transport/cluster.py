"""``ClusterClient``: the pool of memory nodes as one batched object store.

Each key lives on its home node (rendezvous hashing over the live members the metadata service
reports). A batch is split by home and each node gets ONE request per operation, all nodes in
parallel. While the metadata service is unreachable the client is ``detached``: every call
answers misses / ``False`` at once, and it re-attaches by itself when the service is back.
A key that cannot go on the wire (see ``wire.key_problem``) is a miss of its own and is never
routed; the rest of its batch is served.

One transfer engine serves every node (an RDMA engine: one device context, one set of memory
registrations, one completion poller); given by name it is created here (before the membership
thread, so a failure leaks nothing); either way the client owns it, and the metadata service,
and closes them.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from . import wire
from .engine import TransferEngine
from .errors import TransportError
from .metadata.base import MetadataService, NodeInfo
from .metadata.membership import Membership
from .node_client import Item, NodeClient
from .options import ClientOptions
from .registry import make_engine
from .throttle import worth_logging
from .wire import SlotRef

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class ClusterClient:
    def __init__(
        self,
        metadata: MetadataService,
        options: ClientOptions | None = None,
        engine: str | TransferEngine = "tcp",
        refresh_interval_s: float = 1.0,
    ) -> None:
        self.opts = options or ClientOptions()
        self.engine: TransferEngine = make_engine(engine) if isinstance(engine, str) else engine
        self.engine_name = self.engine.name
        self._clients: dict[str, tuple[NodeInfo, NodeClient]] = {}
        self._lock = threading.Lock()
        self.counters: Counter[str] = Counter()
        try:
            self.membership = Membership(metadata, refresh_interval_s)
        except BaseException:
            self.engine.close()
            raise
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hicache-cluster")
        if not self.opts.secret and self.opts.allow_unauthenticated:
            log.warning("remote tier: no shared secret, nodes beyond loopback are reached unauthenticated")

    @property
    def detached(self) -> bool:
        return self.membership.detached

    def nodes(self) -> list[NodeInfo]:
        return self.membership.nodes()

    def _client(self, info: NodeInfo) -> NodeClient:
        with self._lock:
            cur = self._clients.get(info.node_id)
            if cur is not None and (cur[0].host, cur[0].port, cur[0].epoch) == (
                info.host,
                info.port,
                info.epoch,
            ):
                return cur[1]
            client = NodeClient(info.host, info.port, self.opts, self.engine)
            self._clients[info.node_id] = (info, client)
        if cur is not None:
            cur[1].close()
        return client

    def _fan_out(
        self,
        items: Sequence[T],
        key_of: Callable[[T], str],
        call: Callable[[NodeClient, list[T]], list[R]],
        miss: R,
        size_of: Callable[[T], int] | None = None,
    ) -> list[R]:
        """``call`` once per home node with its items, nodes in parallel; ``miss`` for the items
        not routed. With ``size_of`` (puts), an item larger than its home node stores
        (``NodeInfo.max_object``) is not sent: a miss, counted and logged (``_too_large``)."""
        out: list[R] = [miss] * len(items)
        nodes = self.membership.nodes()
        if not nodes:
            self.counters["detached_calls" if self.detached else "no_nodes_calls"] += 1
            return out
        by_id = {n.node_id: n for n in nodes}
        good = self._routable([key_of(it) for it in items])
        routes = self.membership.route([key_of(items[i]) for i in good])
        jobs: list[tuple[list[int], Future[list[R]] | None, list[R] | None]] = []
        for node_id, sub_idx in routes.items():
            idx = [good[j] for j in sub_idx]
            info = by_id[node_id]
            if size_of is not None and info.max_object > 0:
                idx = self._fitting(info, idx, [size_of(items[i]) for i in idx])
                if not idx:
                    continue
            client = self._client(info)
            sub = [items[i] for i in idx]
            if len(routes) == 1:
                jobs.append((idx, None, call(client, sub)))
            else:
                jobs.append((idx, self._pool.submit(call, client, sub), None))
        for idx, fut, res in jobs:
            got = fut.result() if fut is not None else res
            assert got is not None
            for i, r in zip(idx, got, strict=True):
                out[i] = r
        return out

    def _fitting(self, info: NodeInfo, idx: list[int], sizes: list[int]) -> list[int]:
        """The items of ``idx`` that ``info``'s node stores; the others are counted
        (``too_large``) and logged: a client cutting pages larger than its nodes' slab
        (``node.slab_size`` differs between their files) would otherwise share nothing, silently."""
        fit = [i for i, n in zip(idx, sizes, strict=True) if n <= info.max_object]
        refused = len(idx) - len(fit)
        if refused:
            self.counters["too_large"] += refused
            if worth_logging(self.counters["too_large"]):
                log.warning(
                    "memory node %s stores objects of at most %d bytes (its node.slab_size): %d "
                    "larger ones (up to %d bytes) are not sent, a miss (%d so far); give clients the "
                    "same node.slab_size as their nodes, so they cut pages into chunks that fit",
                    info.node_id, info.max_object, refused, max(sizes), self.counters["too_large"],
                )  # fmt: skip
        return fit

    def _routable(self, keys: Sequence[str]) -> list[int]:
        good = []
        for i, key in enumerate(keys):
            problem = wire.key_problem(key, self.opts.limits)
            if problem is None:
                good.append(i)
                continue
            self.counters["bad_keys"] += 1
            if worth_logging(self.counters["bad_keys"]):
                log.warning(
                    "key %.80r %s: it is a miss (%d bad keys so far)", key, problem, self.counters["bad_keys"]
                )
        return good

    def register_memory(self, regions: Sequence[memoryview]) -> int:
        """Register the caller's buffers (SGLang's host pool) with the engine, once; returns how
        many it took. A region the engine refuses is logged and moves through bounce buffers."""
        done = 0
        for region in regions:
            try:
                self.engine.register_memory(region)
                done += 1
            except (TransportError, ValueError, TypeError) as exc:
                self.counters["register_failures"] += 1
                log.warning("%s engine cannot register %d bytes: %s", self.engine_name, len(region), exc)
        return done

    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        return self._fan_out(keys, lambda k: k, lambda c, ks: c.exists_batch(ks), False)

    def lookup_batch(self, keys: Sequence[str]) -> list[SlotRef]:
        """Per key: found, and its object type (``SlotRef.obj_type``), one request per node."""
        return self._fan_out(keys, lambda k: k, lambda c, ks: c.lookup_batch(ks), SlotRef(False))

    def put_batch(self, items: Sequence[Item], obj_type: int = 0) -> list[bool]:
        return self._fan_out(
            items, lambda it: it[0], lambda c, its: c.put_batch(its, obj_type), False, _item_bytes
        )

    def get_batch_into(self, items: Sequence[Item]) -> list[bool]:
        return self._fan_out(items, lambda it: it[0], lambda c, its: c.get_batch_into(its), False)

    def remove_batch(self, keys: Sequence[str]) -> list[bool]:
        return self._fan_out(keys, lambda k: k, lambda c, ks: c.remove_batch(ks), False)

    def clear(self) -> int:
        total = 0
        for info in self.membership.nodes():
            total += max(0, self._client(info).clear())
        return total

    def stats(self) -> dict[str, Any]:
        return {
            "detached": self.detached,
            "nodes": {info.node_id: self._client(info).stats() for info in self.membership.nodes()},
            "client": dict(self.counters),
        }

    def close(self) -> None:
        """Stop the membership thread, close node connections, the engine and the metadata client."""
        self.membership.close()
        self.membership.service.close()
        self._pool.shutdown(wait=False)
        with self._lock:
            clients = [c for _, c in self._clients.values()]
            self._clients.clear()
        for c in clients:
            c.close()
        self.engine.close()  # deregisters the memory registered through this client


def _item_bytes(item: Item) -> int:
    return sum(p.nbytes for p in item[1])
