"""The tcp client moves a batch in a few socket calls, not one per object: every call that blocks
gives the GIL up, and next to a thread running Python (SGLang's scheduler, while the cache
controller's threads call the backend) getting it back takes up to a switch interval (5 ms). A get
of 32 objects of 1 MiB received each object with its own calls and ran at ~0.2 GB/s next to such a
thread (3 GB/s alone); one scatter receive of the whole payload ran at ~0.9-1.2, and of the whole
reply (a GET's reply has the length its request announces: zeros where an object is missing) at
~1.45. Counted here on the client's socket, against a real node process on loopback."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from transport_procs import SECRET, NodeProc

from hicache_mooncake.transport import ClientOptions, NodeClient, wire
from hicache_mooncake.transport.errors import RequestRefused

pytestmark = pytest.mark.integration
OBJECTS = 16
HALF = 512 << 10  # objects of 1 MiB in two parts (a page's K and V)
_CALLS = ("recv", "recv_into", "recvmsg_into", "sendmsg", "sendall", "send")


class CountingSocket:
    """The connection's real socket, with its data calls counted."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._sock, name)
        if name not in _CALLS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


def test_a_batch_of_objects_moves_in_a_few_socket_calls_not_one_per_object(
    make_node: Callable[..., NodeProc],
) -> None:
    node = make_node("calls", capacity="64MiB")
    # one connection: the whole batch on the socket counted
    opts = ClientOptions(timeout_s=30.0, secret=SECRET.encode(), max_stripes=1, connections_per_peer=1)
    client = NodeClient("127.0.0.1", node.port, opts)
    try:
        assert client.ping()  # connected and idle in the pool
        conn = client.pool._idle[0]
        sock = conn.sock = CountingSocket(conn.sock)  # type: ignore[assignment]
        vals = {f"c{i}": bytearray(os.urandom(2 * HALF)) for i in range(OBJECTS)}
        assert (
            client.put_batch([(k, [memoryview(v)[:HALF], memoryview(v)[HALF:]]) for k, v in vals.items()])
            == [True] * OBJECTS
        )
        sent = dict(sock.calls)
        outs = {k: bytearray(len(v)) for k, v in vals.items()}
        got = client.get_batch_into(
            [(k, [memoryview(b)[:HALF], memoryview(b)[HALF:]]) for k, b in outs.items()]
        )
        assert got == [True] * OBJECTS and outs == vals
        calls = sock.calls - Counter(sent)
        # a put: one send of the request and all its parts, one receive of its whole reply
        assert sent == {"sendmsg": 1, "recvmsg_into": 1}, sent
        # a get: the request, then its whole reply (header, meta, every body) in one receive
        receives = calls["recv"] + calls["recv_into"] + calls["recvmsg_into"]
        assert calls["sendmsg"] == 1 and receives == 1, calls
    finally:
        client.close()


def test_a_put_mixing_held_and_new_objects_lands_every_new_body_whole(
    make_node: Callable[..., NodeProc],
) -> None:
    """The node receives a put's bodies in one scatter call: those of objects it already holds go
    to a scratch buffer (several slices for one larger than it), each new one into its own slot."""
    node = make_node("mixed", capacity="64MiB")
    client = NodeClient("127.0.0.1", node.port, ClientOptions(timeout_s=30.0, secret=SECRET.encode()))
    try:
        held = {f"h{i}": bytearray(os.urandom((5 << 20) // 2 + i)) for i in range(3)}  # 2.5 MiB each
        assert client.put_batch([(k, [memoryview(v)]) for k, v in held.items()]) == [True] * 3
        new = {f"n{i}": bytearray(os.urandom(300_000 + 4097 * i)) for i in range(4)}
        again = {k: bytearray(os.urandom(len(v))) for k, v in held.items()}  # other bytes: not taken
        batch = [("h0", again["h0"]), ("n0", new["n0"]), ("n1", new["n1"]), ("h1", again["h1"])]
        batch += [("n2", new["n2"]), ("h2", again["h2"]), ("n3", new["n3"])]
        assert client.put_batch([(k, [memoryview(v)[:1000], memoryview(v)[1000:]]) for k, v in batch]) == [
            True
        ] * len(batch)
        want = {**held, **new}
        outs = {k: bytearray(len(v)) for k, v in want.items()}
        assert client.get_batch_into([(k, [memoryview(b)]) for k, b in outs.items()]) == [True] * len(want)
        assert outs == want  # values are immutable: the held objects kept their first bytes
    finally:
        client.close()


def test_a_get_with_misses_fills_the_found_views_and_the_connection_goes_on(
    make_node: Callable[..., NodeProc],
) -> None:
    """Objects the node does not serve (stored at another size, absent) are misses whose views get
    the zeros sent in their place; the found ones land whole in theirs, and the connection's stream
    stays in step for the next call."""
    node = make_node("misses", capacity="64MiB")
    opts = ClientOptions(timeout_s=30.0, secret=SECRET.encode(), max_stripes=1, connections_per_peer=1)
    client = NodeClient("127.0.0.1", node.port, opts)
    try:
        stored = {f"s{i}": bytearray(os.urandom(200_000 + 4099 * i)) for i in range(3)}
        assert client.put_batch([(k, [memoryview(v)]) for k, v in stored.items()]) == [True] * 3
        # the store serves a get's leading run (as SGLang reads it): misses end the batch here
        asked = [("s0", 200_000), ("s1", 204_099), ("s2", 5_000), ("absent", 300_000)]
        outs = [bytearray(b"\xee" * n) for _, n in asked]
        views = [
            (k, [memoryview(b)[:777], memoryview(b)[777:]]) for (k, _), b in zip(asked, outs, strict=True)
        ]
        assert client.get_batch_into(views) == [True, True, False, False]
        assert outs[0] == stored["s0"] and outs[1] == stored["s1"]
        assert outs[2] == bytes(5_000) and outs[3] == bytes(300_000)  # a miss's bytes: zeros
        again = bytearray(len(stored["s1"]))
        assert client.get_batch_into([("s1", [memoryview(again)])]) == [True] and again == stored["s1"]
        assert client.counters["get_misses"] == 2 and client.counters["get_hits"] == 3
    finally:
        client.close()


def test_a_get_the_node_refuses_fails_at_once_not_at_the_deadline(make_node: Callable[..., NodeProc]) -> None:
    """A client waits for a GET reply's announced length: a request the node refuses (here a reply
    over its payload limit) is answered and the connection closed, so the wait ends now."""
    node = make_node("refuses", node={"max_payload": 1 << 20}, capacity="64MiB")
    client = NodeClient("127.0.0.1", node.port, ClientOptions(timeout_s=30.0, secret=SECRET.encode()))
    try:
        conn = client.pool.acquire(time.monotonic() + 10)
        items = [("absent", 2 << 20)]
        reply_meta, reply_bytes = wire.get_reply_sizes(items)
        start = time.monotonic()
        with pytest.raises(RequestRefused, match="BAD_REQUEST"):  # it answered: not a dead node
            conn.request_into(
                wire.Op.GET, wire.encode_get(items, conn.limits), reply_meta,
                [memoryview(bytearray(reply_bytes))], time.monotonic() + 20,
            )  # fmt: skip
        assert time.monotonic() - start < 5
        client.pool.release(conn, False, peer_alive=True)
        assert client.ping()  # the node itself goes on
        # through the client: a get the node refuses is a miss at once, the node not marked down
        start = time.monotonic()
        assert client.get_batch_into([("absent", [memoryview(bytearray(2 << 20))])]) == [False]
        assert time.monotonic() - start < 5 and client.ping()
    finally:
        client.close()
