"""Issue 8, item 6: one bad key fails only itself, never its batch, and never marks a healthy
node down. Against real node processes: a key over the node's wire limit (the node announces a
smaller ``max_key_len`` than the client's), one over the client's own limit, a lone surrogate
(not encodable as UTF-8) and the empty key, mixed into batches of good keys, through
``NodeClient`` (every engine) and through ``ClusterClient`` (which routes keys by hash)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from transport_procs import SECRET, NodeProc

from hicache_mooncake.transport import ClientOptions, ClusterClient, NodeClient
from hicache_mooncake.transport.metadata import EmbeddedMetadata, NodeInfo

pytestmark = pytest.mark.integration
OPTS = ClientOptions(timeout_s=2.0, connect_timeout_s=1.0, secret=SECRET.encode(), retry_interval_s=5.0)
NODE_MAX_KEY = 64
BAD = {
    "over_node_limit": "n" * (NODE_MAX_KEY + 1),
    "over_client_limit": "c" * (OPTS.limits.max_key_len + 1),
    "lone_surrogate": "k\udc80",
    "empty": "",
}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProc]]:
    tmp = tmp_path_factory.mktemp("bad-keys")
    started: list[NodeProc] = []
    try:
        for i in range(2):
            started.append(NodeProc(tmp, f"bk{i}", None, "t", node={"max_key_len": NODE_MAX_KEY}).start())
        yield started
    finally:
        for n in started:
            n.stop()


def batch(tag: str, bad: str) -> tuple[list[str], list[bool]]:
    keys = [f"{tag}-a", bad, f"{tag}-b", f"{tag}-c"]
    return keys, [k != bad for k in keys]


def pages(keys: list[str]) -> dict[str, bytes]:
    return {k: os.urandom(4096) for k in keys}


def check_batch(store: NodeClient | ClusterClient, keys: list[str], want: list[bool]) -> None:
    data = pages(keys)
    assert store.put_batch([(k, [memoryview(data[k])]) for k in keys]) == want
    assert store.exists_batch(keys) == want
    outs = {k: bytearray(4096) for k in keys}
    assert store.get_batch_into([(k, [memoryview(outs[k])]) for k in keys]) == want
    assert all(outs[k] == data[k] for k, ok in zip(keys, want, strict=True) if ok)
    assert store.remove_batch(keys) == want


@pytest.mark.parametrize("engine", ["tcp", "local"])
@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_key_fails_only_itself(nodes: list[NodeProc], engine: str, kind: str) -> None:
    client = NodeClient("127.0.0.1", nodes[0].port, OPTS, engine)
    try:
        keys, want = batch(f"{engine}-{kind}", BAD[kind])
        check_batch(client, keys, want)
        # the node was never marked down: the very next call is served (retry_interval_s is 5 s)
        t0 = time.monotonic()
        assert client.put_batch([(f"{engine}-{kind}-after", [memoryview(b"x" * 100)])]) == [True]
        assert time.monotonic() - t0 < 1.0
        assert client.counters["unavailable"] == 0 and client.counters["errors"] == 0
        assert client.counters["bad_keys"] == 4  # once per call: put, exists, get, remove
        assert client.stats()["node"]["errors"].get("protocol", 0) == 0  # nothing bad went on the wire
    finally:
        client.close()


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_key_fails_only_itself_in_the_pool(nodes: list[NodeProc], kind: str) -> None:
    meta = EmbeddedMetadata([NodeInfo(n.name, "127.0.0.1", n.port) for n in nodes])
    client = ClusterClient(meta, OPTS, "tcp", refresh_interval_s=0.2)
    try:
        keys = [f"pool-{kind}-{i}" for i in range(8)]
        keys.insert(3, BAD[kind])
        want = [k != BAD[kind] for k in keys]
        check_batch(client, keys, want)
        stats = client.stats()
        assert all(n["reachable"] and n["client"].get("unavailable", 0) == 0 for n in stats["nodes"].values())
        refused = stats["client"].get("bad_keys", 0)
        refused += sum(n["client"].get("bad_keys", 0) for n in stats["nodes"].values())
        assert refused == 4  # once per call: put, exists, get, remove
    finally:
        client.close()
