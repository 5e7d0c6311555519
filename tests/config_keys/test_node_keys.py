"""``node.*`` keys (and ``metadata.heartbeat_*``, read by ``hicache-mooncake node``) that had no test
of their own: a real node server in this process, built from a ``NodeConfig`` with the key at two
values, reached by a real client over real sockets."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_mooncake.store_builder import build_node_store
from hicache_mooncake.transport import ClientOptions, NodeClient, NodeConfig, NodeServer
from hicache_mooncake.transport.metadata.embedded import EmbeddedMetadata

SECRET = "key-audit-secret"
OPTS = ClientOptions(timeout_s=2.0, connect_timeout_s=1.0, secret=SECRET.encode())
MiB = 1 << 20


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., NodeServer]]:
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    servers: list[NodeServer] = []

    def start(metadata: Any = None, **node: Any) -> NodeServer:
        cfg = NodeConfig(**{"port": 0, "capacity": 8 * MiB, "slab_size": MiB, "shm": False, **node})
        hb = {k: node_hb for k, node_hb in start.heartbeat.items()}  # type: ignore[attr-defined]
        srv = NodeServer(cfg, lambda spec: build_node_store(cfg, spec), metadata, **hb)
        srv.start()
        servers.append(srv)
        return srv

    start.heartbeat = {}  # type: ignore[attr-defined]
    yield start
    for srv in servers:
        srv.drain(2)


def client(srv: NodeServer, opts: ClientOptions = OPTS) -> NodeClient:
    return NodeClient(srv.host, srv.port, opts)


def put(c: NodeClient, keys: list[str], size: int = 4096) -> list[bool]:
    return c.put_batch([(k, [memoryview(os.urandom(size))]) for k in keys])


def test_request_limits_refuse_what_exceeds_them(serve: Callable[..., NodeServer]) -> None:
    """``max_key_len``, ``max_batch``, ``max_payload`` (and ``max_meta``) bound one request: past a
    limit the request is refused (False), within it served; the defaults serve all of these."""
    roomy_srv = serve()
    tight_srv = serve(max_key_len=16, max_batch=2, max_payload=64 << 10, max_meta=4096)
    roomy, tight = client(roomy_srv), client(tight_srv)
    try:
        long_key = ["k" * 40]
        assert put(roomy, long_key) == [True] and put(tight, long_key) == [False]
        three = ["a", "b", "c"]  # the client splits what exceeds the node's max_batch (its hello says it)
        puts = (roomy_srv.requests["PUT"], tight_srv.requests["PUT"])
        assert put(roomy, three) == put(tight, three) == [True] * 3
        assert (roomy_srv.requests["PUT"] - puts[0], tight_srv.requests["PUT"] - puts[1]) == (1, 2)
        assert put(roomy, ["big"], 256 << 10) == [True] and put(tight, ["big"], 256 << 10) == [False]
        fresh = client(tight_srv)
        assert put(fresh, ["ok"]) == [True]  # within every limit
        fresh.close()
    finally:
        roomy.close()
        tight.close()


def _silent_socket(srv: NodeServer, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection((srv.host, srv.port), timeout=5, source_address=(source, 0))
    return s


def _closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        while True:
            data = s.recv(4096)  # the node's hello, then EOF when it drops us
            if not data:
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


@pytest.mark.parametrize("timeout_s", [0.5, 30.0])
def test_handshake_timeout_s_drops_silent_sockets(serve: Callable[..., NodeServer], timeout_s: float) -> None:
    srv = serve(handshake_timeout_s=timeout_s)
    s = _silent_socket(srv)
    try:
        assert _closed_within(s, 3.0) is (timeout_s < 3.0)
    finally:
        s.close()


@pytest.mark.parametrize(("max_handshakes", "max_handshakes_per_peer"), [(2, 32), (256, 2), (256, 32)])
def test_handshake_bounds_drop_the_oldest_silent_socket(
    serve: Callable[..., NodeServer], max_handshakes: int, max_handshakes_per_peer: int
) -> None:
    srv = serve(max_handshakes=max_handshakes, max_handshakes_per_peer=max_handshakes_per_peer)
    socks = [_silent_socket(srv) for _ in range(3)]
    try:
        time.sleep(0.3)
        first_dropped = _closed_within(socks[0], 1.0)
        assert first_dropped is (min(max_handshakes, max_handshakes_per_peer) < 3)
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("idle_timeout_s", [0.5, 300.0])
def test_idle_timeout_s_closes_idle_connections(
    serve: Callable[..., NodeServer], idle_timeout_s: float
) -> None:
    srv = serve(idle_timeout_s=idle_timeout_s)
    c = client(srv)
    try:
        assert put(c, ["one"]) == [True] and srv.connections == 1
        deadline = time.monotonic() + 4
        while srv.connections and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (srv.connections == 0) is (idle_timeout_s < 4)
        assert put(c, ["two"]) == [True]  # the client reconnects
    finally:
        c.close()


def test_unix_socket_replaces_the_tcp_listener(serve: Callable[..., NodeServer], tmp_path: Path) -> None:
    path = tmp_path / "node.sock"
    srv = serve(unix_socket=str(path))
    assert srv.host == f"unix:{path}" and path.is_socket()
    c = client(srv)
    try:
        assert put(c, ["over-unix"]) == [True]
    finally:
        c.close()


def test_the_node_secret_comes_from_secret_env_or_secret_file(
    serve: Callable[..., NodeServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEY_AUDIT_OTHER_SECRET", "from-the-env")
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-the-file\n")
    by_env = serve(secret_env="KEY_AUDIT_OTHER_SECRET")
    by_file = serve(secret_file=str(secret_file))
    for srv, right in ((by_env, "from-the-env"), (by_file, "from-the-file")):
        good = client(srv, ClientOptions(timeout_s=2.0, connect_timeout_s=1.0, secret=right.encode()))
        wrong = client(srv)  # HICACHE_NODE_SECRET's value: not this node's secret
        try:
            assert put(good, ["k"]) == [True]
            assert put(wrong, ["k2"]) == [False] and wrong.counters["auth_errors"] > 0
        finally:
            good.close()
            wrong.close()


def test_ready_file_says_where_the_node_listens(serve: Callable[..., NodeServer], tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    srv = serve(ready_file=str(ready))
    assert ready.read_text().split() == [str(srv.host), str(srv.port)]
    serve()
    assert len(list(tmp_path.iterdir())) == 1  # without the key, nothing is written


def test_capacity_and_slab_size_shape_the_node_arena(serve: Callable[..., NodeServer]) -> None:
    small = serve(capacity=4 * MiB, slab_size=MiB)
    big = serve(capacity=16 * MiB, slab_size=MiB)
    assert small.arena_size < big.arena_size
    c = client(small)
    try:  # a 2 MiB object is larger than a 1 MiB slab: refused; a 512 KiB one fits
        assert put(c, ["large"], 2 * MiB) == [False] and put(c, ["fits"], 512 << 10) == [True]
    finally:
        c.close()


def test_eviction_names_the_node_policy(serve: Callable[..., NodeServer]) -> None:
    with pytest.raises(ValueError, match=r"node\.eviction"):
        serve(eviction="no-such-policy")
    for name in ("lru", "s3fifo"):
        srv = serve(eviction=name)
        c = client(srv)
        try:
            assert put(c, ["x"]) == [True]
        finally:
            c.close()


@pytest.mark.parametrize(("heartbeat_interval_s", "heartbeat_ttl_s"), [(0.2, 1.0), (30.0, 0.5)])
def test_heartbeats_keep_a_node_in_the_membership(
    serve: Callable[..., NodeServer], heartbeat_interval_s: float, heartbeat_ttl_s: float
) -> None:
    """A node renews its membership every ``heartbeat_interval_s`` for ``heartbeat_ttl_s``: renewed
    faster than it expires it stays a member, else it drops out after the first TTL."""
    md = EmbeddedMetadata()
    serve.heartbeat = {  # type: ignore[attr-defined]
        "heartbeat_interval_s": heartbeat_interval_s,
        "heartbeat_ttl_s": heartbeat_ttl_s,
    }
    srv = serve(md)
    time.sleep(2.0)
    members = [n.node_id for n in md.live_nodes()]
    assert (srv.node_id in members) is (heartbeat_interval_s < heartbeat_ttl_s)


def test_rdma_keys_reach_the_responder_options() -> None:
    """The node's ``rdma_port`` / ``rdma_gid_index`` / ``rdma_hop_limit`` / ``rdma_traffic_class`` /
    ``rdma_service_level`` are the options its RDMA responder opens the device with (what each does
    to the queue pairs: tests/transport/test_rdma_engine.py::test_7, same options class)."""
    cfg = NodeConfig(
        rdma_device="sim0",
        rdma_port=2,
        rdma_gid_index=3,
        rdma_hop_limit=8,
        rdma_traffic_class=106,
        rdma_service_level=5,
    )
    o = cfg.rdma_options()
    assert (o.device, o.port, o.gid_index, o.hop_limit, o.traffic_class, o.service_level) == (
        "sim0",
        2,
        3,
        8,
        106,
        5,
    )
    assert NodeConfig(rdma_device="sim0").rdma_options().gid_index == -1  # auto


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_node_metrics_host_is_the_address_the_endpoint_listens_on(
    serve: Callable[..., NodeServer], host: str, tmp_path: Path
) -> None:
    """``node.metrics.host``: the node's endpoint answers on that loopback address, not the other."""
    from test_metrics_host_keys import LOOPBACKS, answers

    from hicache_mooncake.config.cluster import NodeSection
    from hicache_mooncake.metrics.node import serve_node_metrics

    section = NodeSection.model_validate(
        {"metrics": {"host": host, "port": 0, "discovery_dir": str(tmp_path)}}
    )
    exporter = serve_node_metrics(serve(), section.metrics)
    assert exporter is not None and exporter.port is not None
    try:
        got = {other: answers(other, exporter.port) for other in LOOPBACKS}
        assert got == {h: h == host for h in LOOPBACKS}
    finally:
        exporter.close()


def test_max_meta_refuses_a_request_whose_metadata_exceeds_it(serve: Callable[..., NodeServer]) -> None:
    """``node.max_meta``: 40 keys of 150 bytes (about 6 KiB of request metadata, every key and the
    batch within their own limits) are served by a default node, refused (False) by one with
    ``max_meta=4096``; a small batch is served by both."""
    tight_srv = serve(max_meta=4096)
    roomy, tight, fresh = client(serve()), client(tight_srv), client(tight_srv)
    try:
        many = [f"{i:03d}" + "m" * 147 for i in range(40)]
        assert put(roomy, many, 64) == [True] * 40
        assert put(tight, many, 64) == [False] * 40
        assert put(fresh, many[:4], 64) == [True] * 4  # within the limit (a fresh client: the
        # refused one may be backing off from the node that dropped it)
    finally:
        for c in (roomy, tight, fresh):
            c.close()
