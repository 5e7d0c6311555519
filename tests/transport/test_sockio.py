"""The socket helpers' deadlines, on real loopback TCP sockets: a peer that stalls mid-message
costs a call its deadline and no more, a call without a deadline is not cut short by one set for
an earlier call, and a socket connected with Python's own timeout still works. (No process is
started: both ends live in this one.)"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from hicache_mooncake.transport.errors import PeerUnavailable
from hicache_mooncake.transport.sockio import recv_into_exact, send_all


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    srv = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(srv.getsockname(), timeout=5)  # as Connection does
    peer, _ = srv.accept()
    srv.close()
    yield client, peer
    client.close()
    peer.close()


def test_a_peer_that_stalls_mid_message_costs_the_receiver_its_deadline(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, peer = pair
    peer.sendall(b"x" * 1000)  # a tenth of what the receiver waits for, then nothing
    buf = bytearray(10_000)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        recv_into_exact(client, memoryview(buf), start + 0.4)
    took = time.monotonic() - start
    assert 0.35 <= took < 1.0, took
    assert buf[:1000] == b"x" * 1000 and buf[1000:] == bytes(9000)


def test_a_peer_that_does_not_read_costs_the_sender_its_deadline(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, _peer = pair
    payload = memoryview(bytearray(64 << 20))  # far more than both socket buffers hold
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        send_all(client, [payload], start + 0.4)
    assert 0.35 <= time.monotonic() - start < 1.0


def test_a_receive_without_a_deadline_outlasts_one_set_for_an_earlier_call(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, peer = pair
    peer.sendall(b"a" * 10)
    first = bytearray(10)
    recv_into_exact(client, memoryview(first), time.monotonic() + 0.2)  # arms a 0.2 s timeout
    assert first == b"a" * 10
    late = threading.Timer(0.6, lambda: peer.sendall(b"b" * 10))
    late.start()
    second = bytearray(10)
    recv_into_exact(client, memoryview(second), None)  # waits past the earlier 0.2 s
    late.join()
    assert second == b"b" * 10


def test_large_messages_arrive_whole_in_both_directions_and_a_close_is_told(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, peer = pair
    data = os.urandom(8 << 20)
    parts = [memoryview(data)[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
    got = bytearray(len(data))
    sender = threading.Thread(target=send_all, args=(client, parts, time.monotonic() + 10))
    sender.start()
    recv_into_exact(peer, memoryview(got), time.monotonic() + 10)
    sender.join()
    assert got == data
    back = bytearray(len(data))
    sender = threading.Thread(target=send_all, args=(peer, [memoryview(got)], None))
    sender.start()
    recv_into_exact(client, memoryview(back), None)
    sender.join()
    assert back == data
    peer.sendall(b"z" * 5)
    peer.close()
    rest = bytearray(10)
    with pytest.raises(PeerUnavailable):
        recv_into_exact(client, memoryview(rest), time.monotonic() + 5)
    assert rest[:5] == b"z" * 5
