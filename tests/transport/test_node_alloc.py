"""Issue 48, item 6: a memory node evicts nothing for a reservation it can never grant.

Against a real node process over a real socket: a stored page, then an ALLOC (one-sided writers)
or a PUT (two-sided) of an object larger than the node's largest slot (2^64-1 bytes, twice the
arena, one byte over the slab's object limit). The reply is "no space" for that object alone
(the rest of its batch is served) and the stored page is still there, byte for byte. Before the
fix the store made room for it first (its placement dropped every page it held), then refused."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from transport_procs import SECRET, NodeProc

from hicache_mooncake.transport import ClientOptions, NodeClient, wire
from hicache_mooncake.transport.connection import Connection
from hicache_mooncake.transport.node.served_store import RESERVED_NEW, RESERVED_NO_SPACE
from hicache_mooncake.transport.object_header import HEADER_SIZE
from hicache_mooncake.transport.wire import Op

pytestmark = pytest.mark.integration
OPTS = ClientOptions(timeout_s=5.0, connect_timeout_s=2.0, secret=SECRET.encode())
CAPACITY = 16 << 20
SLAB = 4 << 20
LARGEST = SLAB - HEADER_SIZE  # the largest object a slot of the node holds (body + header)
PAGE = 64 << 10


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    proc = NodeProc(
        tmp_path_factory.mktemp("node-alloc"), "alloc0", None, "t", "16MiB", node={"slab_size": "4MiB"}
    )
    try:
        yield proc.start()
    finally:
        proc.stop()


@pytest.fixture
def client(node: NodeProc) -> Iterator[NodeClient]:
    c = NodeClient("127.0.0.1", node.port, OPTS)
    try:
        yield c
    finally:
        c.close()


def store_live_pages(client: NodeClient, tag: str, n: int = 4) -> dict[str, bytes]:
    pages = {f"{tag}-live{i}": os.urandom(PAGE) for i in range(n)}
    assert client.put_batch([(k, [memoryview(v)]) for k, v in pages.items()]) == [True] * n
    return pages


def assert_intact(client: NodeClient, pages: dict[str, bytes]) -> None:
    keys = list(pages)
    assert client.exists_batch(keys) == [True] * len(keys), "a stored page was evicted"
    outs = {k: bytearray(PAGE) for k in keys}
    assert client.get_batch_into([(k, [memoryview(outs[k])]) for k in keys]) == [True] * len(keys)
    assert all(outs[k] == pages[k] for k in keys)


def alloc(node: NodeProc, items: list[tuple[str, int]]) -> list[int]:
    """A raw ALLOC (what a one-sided writer sends) of ``(key, size)``: the status of each item.
    The connection closes afterwards, so the node releases what it reserved."""
    conn = Connection("127.0.0.1", node.port, OPTS)
    try:
        meta = wire.encode_put([(k, size, 0) for k, size in items], conn.limits)
        _, reply = conn.request(Op.ALLOC, meta, (), time.monotonic() + 5.0)
        return wire.decode_alloc_records(reply, len(items))["status"].tolist()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "size",
    [2**64 - 1, 2 * CAPACITY, LARGEST + 1],
    ids=["2^64-1", "twice-the-arena", "one-over-the-slot"],
)
def test_alloc_the_node_can_never_grant_is_refused_and_evicts_nothing(
    node: NodeProc, client: NodeClient, size: int
) -> None:
    pages = store_live_pages(client, f"a{size}")
    assert alloc(node, [(f"huge{size}", size)]) == [RESERVED_NO_SPACE]
    assert_intact(client, pages)


def test_alloc_batch_serves_its_fitting_objects_and_refuses_only_the_oversized(
    node: NodeProc, client: NodeClient
) -> None:
    pages = store_live_pages(client, "mixed")
    statuses = alloc(node, [("m-ok", PAGE), ("m-huge", 2**64 - 1), ("m-largest", LARGEST)])
    assert statuses == [RESERVED_NEW, RESERVED_NO_SPACE, RESERVED_NEW]
    assert_intact(client, pages)
    errors = client.stats()["node"]["errors"]
    assert errors.get("too_large", 0) >= 1  # counted, by its cause


def test_put_of_an_object_over_the_slot_is_refused_alone_and_evicts_nothing(
    node: NodeProc, client: NodeClient
) -> None:
    pages = store_live_pages(client, "put")
    big = os.urandom(LARGEST + 1)
    small = os.urandom(PAGE)
    got = client.put_batch([("p-big", [memoryview(big)]), ("p-small", [memoryview(small)])])
    assert got == [False, True]
    assert_intact(client, pages)
    assert client.exists_batch(["p-big", "p-small"]) == [False, True]
