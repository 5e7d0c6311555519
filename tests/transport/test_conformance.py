"""One conformance suite for every transfer engine, against real memory-node processes on
loopback (metadata in a real redis-server). ``rdma`` runs on the host's first RDMA device when
the kernel has one, else on the verbs simulator (tests/fake_rdma): never skipped."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rdma_sim import Fabric, real_device, use_real_pyverbs
from transport_procs import SECRET, NodeProc, RedisProc, free_port

from hicache_mooncake.transport import ClientOptions, ClusterClient, NodeClient, make_engine
from hicache_mooncake.transport.metadata.redis_backend import RedisMetadata

pytestmark = pytest.mark.integration
ENGINES = ["tcp", "local", "rdma"]
OPTS = ClientOptions(timeout_s=2.0, secret=SECRET.encode())


class Cluster:
    def __init__(self, redis: RedisProc, nodes: list[NodeProc]) -> None:
        self.redis, self.nodes = redis, nodes

    def metadata(self) -> RedisMetadata:
        return RedisMetadata(self.redis.url, "conf", timeout_s=0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two nodes serving tcp, shared memory and RDMA (a real device, or the simulator)."""
    tmp: Path = tmp_path_factory.mktemp("conformance")
    device = real_device()
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        if device is None:
            fabric = stack.enter_context(Fabric(tmp / "fabric"))
            device, env = fabric.device, fabric.env()
        else:
            use_real_pyverbs()
        print(f"rdma runs on {'the simulator' if env else 'a real device'}: {device}")
        redis = RedisProc(free_port())
        redis.start()
        nodes: list[NodeProc] = []
        try:
            for name in ("n1", "n2"):
                extra = {"rdma_device": device}
                nodes.append(NodeProc(tmp, name, redis.url, "conf", node=extra, env=env).start())
            yield Cluster(redis, nodes)
        finally:
            for n in nodes:
                n.stop(signal.SIGTERM)
            redis.stop()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _page(i: int, n: int) -> bytearray:
    return bytearray(os.urandom(16) * (n // 16))


def test_put_get_exists_remove(cluster: Cluster, engine: str) -> None:
    n = cluster.nodes[0]
    c = NodeClient("127.0.0.1", n.port, OPTS, engine)
    try:
        pages = {f"{engine}-pg-{i}": _page(i, 64 << 10) for i in range(8)}
        # two parts per page (K and V), gathered on put and scattered on get
        items = [(k, [memoryview(v)[:4096], memoryview(v)[4096:]]) for k, v in pages.items()]
        assert c.put_batch(items) == [True] * 8
        assert c.put_batch(items[:1]) == [True]  # immutable: already present is success
        assert c.exists_batch([*pages, "absent"]) == [True] * 8 + [False]
        outs = {k: bytearray(len(v)) for k, v in pages.items()}
        got = c.get_batch_into([(k, [memoryview(o)[:100], memoryview(o)[100:]]) for k, o in outs.items()])
        assert got == [True] * 8
        assert outs == pages
        # wrong size is a miss, not a partial copy
        assert c.get_batch_into([(next(iter(pages)), [memoryview(bytearray(10))])]) == [False]
        assert c.get_batch_into([("absent", [memoryview(bytearray(10))])]) == [False]
        refs = c.lookup_batch([next(iter(pages)), "absent"])
        assert refs[0].found and refs[0].size == 64 << 10 and not refs[1].found
        assert c.remove_batch([next(iter(pages)), "absent"]) == [True, False]
        assert c.exists_batch([next(iter(pages))]) == [False]
        st = c.stats()
        assert st["reachable"] and st["node"]["store"]["objects"] >= 7
    finally:
        c.close()


def test_exists_128_keys_is_one_round_trip(cluster: Cluster, engine: str) -> None:
    n = cluster.nodes[1]
    c = NodeClient("127.0.0.1", n.port, OPTS, engine)
    try:
        before = c.stats()["node"]["requests"].get("EXISTS", 0)
        keys = [f"{engine}-x-{i}" for i in range(128)]
        assert c.exists_batch(keys) == [False] * 128
        after = c.stats()["node"]["requests"].get("EXISTS", 0)
        assert after - before == 1
    finally:
        c.close()


def test_engine_level_read_write(cluster: Cluster, engine: str) -> None:
    """The TransferEngine itself: reserved slot written by address, read back by address."""
    from hicache_mooncake.transport import wire
    from hicache_mooncake.transport.engine import Segment

    n = cluster.nodes[0]
    c = NodeClient("127.0.0.1", n.port, OPTS, engine)
    eng = make_engine(engine)
    try:
        conn = c.pool.acquire(time.monotonic() + 2)
        seg = Segment.from_handshake("127.0.0.1", n.port, conn.segment)
        eng.open_segment(seg, c.pool)
        payload = bytearray(os.urandom(8192))
        _, meta = conn.request(wire.Op.ALLOC, wire.encode_put([(f"{engine}-eng", len(payload), 0)], c.limits))
        [(status, offset, version)] = wire.decode_alloc_records(meta, 1).tolist()
        assert status == 0
        assert eng.write(seg.node_id, [(offset, [memoryview(payload)])], time.monotonic() + 2) == [True]
        _, meta = conn.request(wire.Op.COMMIT, wire.encode_commit([(f"{engine}-eng", version)], c.limits))
        assert wire.decode_flags(meta, 1) == [1]
        c.pool.release(conn, True)
        out = bytearray(len(payload))
        assert eng.read(seg.node_id, [(offset, [memoryview(out)])], time.monotonic() + 2) == [True]
        assert out == payload
        if engine == "tcp":  # the node answers every extent: zeros in place of one it may not serve
            free, again = bytearray(b"\xee" * 4096), bytearray(len(payload))
            extents = [(offset + (1 << 20), [memoryview(free)]), (offset, [memoryview(again)])]
            assert eng.read(seg.node_id, extents, time.monotonic() + 2) == [False, True]
            assert free == bytes(4096) and again == payload
    finally:
        eng.close()
        c.close()


def test_stale_one_sided_read_is_a_miss(cluster: Cluster, engine: str) -> None:
    """Evict-and-reuse under a reader: the header check turns it into a miss."""
    n = cluster.nodes[0]
    c = NodeClient("127.0.0.1", n.port, OPTS, engine)
    try:
        key = f"{engine}-stale"
        data = bytearray(os.urandom(4096))
        assert c.put_batch([(key, [memoryview(data)])]) == [True]
        ref = c.lookup_batch([key])[0]
        assert c.remove_batch([key]) == [True]
        assert c.put_batch([(f"{engine}-other", [memoryview(bytearray(4096))])]) == [True]
        if engine != "tcp":
            from hicache_mooncake.transport.object_header import HEADER_SIZE, ObjectHeader

            hdr = bytearray(HEADER_SIZE)
            c.engine.read("n1", [(ref.header, [memoryview(hdr)])], time.monotonic() + 1)
            assert not ObjectHeader.unpack(hdr).matches(key, ref.version, ref.size)
        assert c.get_batch_into([(key, [memoryview(bytearray(4096))])]) == [False]
    finally:
        c.close()


@pytest.mark.parametrize("engine", ["local", "rdma"])
@pytest.mark.parametrize("reused_before_read", [1, 2])
def test_slots_reused_during_a_one_sided_get_are_misses_and_the_rest_hits(
    cluster: Cluster, engine: str, reused_before_read: int
) -> None:
    """Objects removed and their slots given to other keys between LOOKUP and the first read
    (``reused_before_read`` 1), or between the first read and the second reading of the headers
    (2), are misses counted as stale reads; the batch's other objects are served exactly."""
    n = cluster.nodes[0]
    c = NodeClient("127.0.0.1", n.port, OPTS, engine)
    tag = f"{engine}-reuse{reused_before_read}"
    try:
        pages = {f"{tag}-{i}": _page(i, 4096) for i in range(8)}
        assert c.put_batch([(k, [memoryview(v)]) for k, v in pages.items()]) == [True] * 8
        gone = [f"{tag}-1", f"{tag}-6"]
        other = NodeClient("127.0.0.1", n.port, OPTS, "tcp")
        real_read, calls = c.engine.read, []

        def read(node_id: str, extents: list, deadline: float) -> list[bool]:  # type: ignore[type-arg]
            calls.append(len(extents))
            if len(calls) == reused_before_read:  # another client evicts two and fills their slots
                assert other.remove_batch(gone) == [True, True]
                fill = [(f"{tag}-new-{i}", [memoryview(_page(100 + i, 4096))]) for i in range(64)]
                assert other.put_batch(fill) == [True] * 64
            return real_read(node_id, extents, deadline)

        c.engine.read = read  # type: ignore[method-assign]
        before = c.counters["stale_reads"]
        outs = {k: bytearray(4096) for k in pages}
        got = c.get_batch_into([(k, [memoryview(o)]) for k, o in outs.items()])
        assert got == [k not in gone for k in pages]
        assert calls == [16, 6 if reused_before_read == 1 else 8]  # a miss of round 1 is not read again
        assert c.counters["stale_reads"] - before == 2
        assert all(outs[k] == v for k, v in pages.items() if k not in gone)
        other.close()
    finally:
        c.close()


def test_pages_stored_by_one_client_found_by_another(cluster: Cluster, engine: str) -> None:
    a = ClusterClient(cluster.metadata(), OPTS, engine, refresh_interval_s=0.2)
    b = ClusterClient(cluster.metadata(), OPTS, "tcp", refresh_interval_s=0.2)
    try:
        deadline = time.monotonic() + 5
        while len(a.nodes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {x.node_id for x in a.nodes()} == {"n1", "n2"}
        pages = {f"{engine}-shared-{i}": _page(i, 32 << 10) for i in range(40)}
        assert a.put_batch([(k, [memoryview(v)]) for k, v in pages.items()], obj_type=0) == [True] * 40
        assert b.exists_batch(list(pages)) == [True] * 40
        outs = {k: bytearray(len(v)) for k, v in pages.items()}
        assert b.get_batch_into([(k, [memoryview(o)]) for k, o in outs.items()]) == [True] * 40
        assert outs == pages
        per_node = {nid: s["node"]["store"]["objects"] for nid, s in b.stats()["nodes"].items()}
        assert all(v > 0 for v in per_node.values()), per_node  # both nodes are homes
        refs = b.lookup_batch(list(pages)[:3])
        assert all(r.found and r.obj_type == 0 for r in refs)
    finally:
        a.close()
        b.close()
