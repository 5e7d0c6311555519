"""KV events of the remote pool tier (issue 47): pages this host writes to a real memory node (in
this process, loopback TCP) are published with medium ``EXTERNAL``; a removal and a clear too."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pytest
import zmq
from sglang.srt.disaggregation.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    StorageMedium,
)
from sglang.srt.mem_cache.utils import hash_str_to_int64

from hicache_mooncake.config.events import EventsConfig
from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.kv_events.attach import start_publisher
from hicache_mooncake.store_builder import build_node_store, build_remote
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore
from hicache_mooncake.transport import NodeConfig, NodeServer

SECRET = "kv-events-remote"
MiB = 1 << 20
PAGE = 64 << 10
DECODE = msgspec.msgpack.Decoder(KVEventBatch)
EXTERNAL = StorageMedium.EXTERNAL.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeServer]:
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    cfg = NodeConfig(port=0, capacity=16 * MiB, slab_size=MiB, shm=False)
    srv = NodeServer(cfg, lambda spec: build_node_store(cfg, spec))
    srv.start()
    yield srv
    srv.drain(2)


def test_pool_writes_removals_and_clears_are_external(node: NodeServer) -> None:
    cfg = validate_config(
        {
            "tiers": {"remote": {"enabled": True, "timeout_s": 5.0}},
            "metadata": {
                "backend": "embedded",
                "nodes": [{"node_id": "n", "host": node.host, "port": node.port}],
            },
        }
    )
    tier = build_remote(cfg, "rank0")
    assert tier is not None
    store = TieredStore([tier], lambda: make_policy("lru"), StoreOptions(timeout_s=5.0))
    publisher = start_publisher(EventsConfig(endpoint=f"tcp://127.0.0.1:{free_port()}"), store)
    assert publisher is not None
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt_string(zmq.SUBSCRIBE, "")
    sub.connect(publisher.endpoint)
    events: list[Any] = []

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and sub.poll(int(left * 1000)):
            _topic, _seq, payload = sub.recv_multipart()
            events.extend(DECODE.decode(payload).events)

    def put(names: list[str]) -> list[bool]:
        arrays = [np.frombuffer(k.encode().ljust(PAGE, b"."), dtype=np.uint8).copy() for k in names]
        return store.put_batch(names, [[memoryview(a)] for a in arrays])

    try:
        for i in range(200):  # ZMQ's slow joiner: store probe pages until one is seen
            put([f"m/d/probe{i}@tp0of1"])
            pump(0.05)
            if events:
                break
        pages = [hashlib.sha256(f"pool{i}".encode()).hexdigest() for i in range(3)]
        keys = [f"m/d/{h}@tp0of1" for h in pages]
        assert put(keys) == [True] * 3
        assert store.remove(keys[0])
        store.clear()
        end = time.monotonic() + 10
        while not any(type(e) is AllBlocksCleared for e in events) and time.monotonic() < end:
            pump(0.1)
        ids = [hash_str_to_int64(h) for h in pages]
        stored = {
            h for e in events if type(e) is BlockStored and e.medium == EXTERNAL for h in e.block_hashes
        }
        removed = {
            h for e in events if type(e) is BlockRemoved and e.medium == EXTERNAL for h in e.block_hashes
        }
        assert set(ids) <= stored
        assert ids[0] in removed
        assert any(type(e) is AllBlocksCleared for e in events)
    finally:
        sub.close(linger=0)
        store.close()
        publisher.close()
