"""Failure behaviour against real processes: dead nodes, Redis outages, hostile frames, auth."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import struct
import threading
import time
from typing import Any

import pytest
from transport_procs import SECRET

from hicache_mooncake.transport import ClientOptions, ClusterClient, NodeClient, wire
from hicache_mooncake.transport.metadata.redis_backend import RedisMetadata

pytestmark = pytest.mark.integration
OPTS = ClientOptions(timeout_s=1.0, connect_timeout_s=0.5, secret=SECRET.encode())


def _auth(sock: socket.socket, secret: bytes = SECRET.encode()) -> None:
    from hicache_mooncake.transport import auth

    hdr = sock.recv(wire.HEADER_SIZE, socket.MSG_WAITALL)
    h = wire.unpack_header(hdr, wire.Limits())
    nonce = sock.recv(h.meta_len, socket.MSG_WAITALL)
    proof = auth.client_proof(secret, nonce) + auth.new_nonce()
    sock.sendall(wire.pack_header(wire.FrameHeader(wire.Op.AUTH, 0, 1, len(proof), 0)) + proof)
    h = wire.unpack_header(sock.recv(wire.HEADER_SIZE, socket.MSG_WAITALL), wire.Limits())
    sock.recv(h.meta_len, socket.MSG_WAITALL)


def test_wrong_secret_is_refused(node_factory: Any) -> None:
    node = node_factory("auth")
    bad = NodeClient("127.0.0.1", node.port, ClientOptions(timeout_s=1.0, secret=b"wrong"))
    good = NodeClient("127.0.0.1", node.port, OPTS)
    try:
        assert bad.put_batch([("k", [memoryview(b"x" * 10)])]) == [False]
        assert bad.counters["auth_errors"] == 1
        assert good.put_batch([("k", [memoryview(b"x" * 10)])]) == [True]
        assert good.stats()["node"]["errors"]["auth"] >= 1
    finally:
        bad.close()
        good.close()


def test_fuzzed_and_oversized_frames_never_take_a_node_down(node_factory: Any) -> None:
    node = node_factory("fuzz")
    rng = random.Random(1234)
    ops = [int(op) for op in wire.Op] + [0, 99, 255]
    for i in range(150):
        with socket.create_connection(("127.0.0.1", node.port), timeout=2) as s:
            if i % 3:
                _auth(s)
            kind = i % 5
            if kind == 0:  # random garbage
                s.sendall(os.urandom(rng.randint(1, 200)))
            elif kind == 1:  # oversized meta / payload
                s.sendall(
                    wire.HEADER.pack(wire.MAGIC, wire.VERSION, rng.choice(ops), 0, 0, i, 1 << 31, 1 << 62)
                )
            elif kind == 2:  # valid header, random meta
                meta = os.urandom(rng.randint(0, 64))
                s.sendall(
                    wire.HEADER.pack(wire.MAGIC, wire.VERSION, rng.choice(ops), 0, 0, i, len(meta), 0) + meta
                )
            elif kind == 3:  # PUT whose sizes lie about the payload, then hang up
                meta = struct.pack("!I", 1) + struct.pack("!H", 1) + b"k" + struct.pack("!QB", 1 << 20, 0)
                s.sendall(
                    wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.Op.PUT, 0, 0, i, len(meta), 1 << 20)
                    + meta
                    + b"x" * 100
                )
            else:  # batch count over the limit
                meta = struct.pack("!I", 10_000_000)
                s.sendall(
                    wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.Op.EXISTS, 0, 0, i, len(meta), 0) + meta
                )
            s.settimeout(0.05)
            with contextlib.suppress(OSError):
                s.recv(4096)
    assert node.alive()
    c = NodeClient("127.0.0.1", node.port, OPTS)
    try:
        assert c.put_batch([("after-fuzz", [memoryview(b"y" * 100)])]) == [True]
        out = bytearray(100)
        assert c.get_batch_into([("after-fuzz", [memoryview(out)])]) == [True] and out == b"y" * 100
        st = c.stats()["node"]
        assert st["errors"].get("protocol", 0) > 0
        assert st["store"]["pending"] == 0  # the half-sent PUT's reservation was released
    finally:
        c.close()


def test_killing_a_node_mid_transfer_gives_misses_within_the_timeout(node_factory: Any) -> None:
    node = node_factory("victim", capacity="256MiB", slab_size="16MiB")
    c = NodeClient("127.0.0.1", node.port, OPTS)
    try:
        pages = [(f"big-{i}", [memoryview(bytearray(8 << 20))]) for i in range(8)]
        assert c.put_batch(pages[:2]) == [True, True]
        results: dict[str, Any] = {}

        def transfer() -> None:
            t0 = time.monotonic()
            results["put"] = c.put_batch(pages[2:])
            results["get"] = c.get_batch_into(pages[:2] * 4)
            results["elapsed"] = time.monotonic() - t0

        t = threading.Thread(target=transfer)
        t.start()
        time.sleep(0.01)
        node.stop(signal.SIGKILL)
        t.join(10)
        assert not t.is_alive(), "transfer hung"
        assert results["elapsed"] < 2 * OPTS.timeout_s + 1
        # after the kill everything is a miss, quickly (peer marked down, no connect storms)
        t0 = time.monotonic()
        assert c.exists_batch(["big-0", "big-1"]) == [False, False]
        assert c.get_batch_into(pages[:2]) == [False, False]
        assert time.monotonic() - t0 < OPTS.timeout_s + 0.5
        assert c.counters["unavailable"] + c.counters["errors"] > 0
    finally:
        c.close()


def test_redis_restart_detaches_and_rejoins(redis_server: Any, node_factory: Any) -> None:
    node = node_factory("r1", redis_url=redis_server.url, namespace="rr")
    client = ClusterClient(RedisMetadata(redis_server.url, "rr", 0.3), OPTS, "tcp", refresh_interval_s=0.2)
    try:
        deadline = time.monotonic() + 5
        while not client.nodes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [n.node_id for n in client.nodes()] == ["r1"]
        assert client.put_batch([("rk", [memoryview(b"z" * 64)])]) == [True]
        redis_server.stop()
        deadline = time.monotonic() + 5
        while not client.detached and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.detached
        t0 = time.monotonic()
        assert client.exists_batch(["rk"]) == [False]  # detached: a miss, at once
        assert time.monotonic() - t0 < 0.1
        assert node.alive()
        redis_server.start()  # empty Redis: the node's heartbeat re-registers it
        deadline = time.monotonic() + 8
        while (client.detached or not client.nodes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not client.detached
        assert [n.node_id for n in client.nodes()] == ["r1"]
        assert client.exists_batch(["rk"]) == [True]  # the node kept its data
    finally:
        client.close()


def test_sigterm_drains_and_deregisters(redis_server: Any, node_factory: Any) -> None:
    node = node_factory("d1", redis_url=redis_server.url, namespace="dr")
    meta = RedisMetadata(redis_server.url, "dr", 0.5)
    try:
        assert [n.node_id for n in meta.live_nodes()] == ["d1"]
        shm = meta.live_nodes()[0].shm_path
        assert shm and os.path.exists(shm)
        assert node.stop(signal.SIGTERM) == 0
        assert meta.live_nodes() == []
        assert not os.path.exists(shm)
    finally:
        meta.close()
