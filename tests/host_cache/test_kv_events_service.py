"""KV events from the host cache service (issue 47): the service publishes what its tiers hold,
each page once whatever the number of ranks that store their shards; the ranks do not publish."""

from __future__ import annotations

import hashlib
import socket
import time
from typing import Any

import msgspec
import numpy as np
import pytest
import zmq
from host_cache_procs import PrivateHostCache
from sglang.srt.disaggregation.kv_events import BlockStored, KVEventBatch, StorageMedium
from sglang.srt.mem_cache.utils import hash_str_to_int64

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration
DECODE = msgspec.msgpack.Decoder(KVEventBatch)
PAGE = 64 << 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parts(tag: str) -> list[memoryview]:
    arr = np.frombuffer(tag.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()
    return [memoryview(arr)]


def test_the_service_publishes_each_page_once_for_all_ranks(host_cache: PrivateHostCache) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    extra = host_cache.extra(host_cache="on")
    extra["events"] = {"endpoint": endpoint, "flush_interval_s": 0.01}
    store = build_client_store(validate_config(extra), "rank0", True)  # starts the service
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt_string(zmq.SUBSCRIBE, "")
    events: list[Any] = []

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and sub.poll(int(left * 1000)):
            _topic, _seq, payload = sub.recv_multipart()
            events.extend(DECODE.decode(payload).events)

    try:
        host_cache.wait_pid()
        sub.connect(endpoint)
        for i in range(200):  # ZMQ's slow joiner: store probe pages until one is seen
            store.put_batch([f"m/d/probe{i}@tp0of2"], [parts(f"probe{i}")])
            pump(0.05)
            if events:
                break
        assert events, host_cache.log_tail()
        pages = [hashlib.sha256(f"page{i}".encode()).hexdigest() for i in range(4)]
        keys = [f"m/d/{h}@tp{rank}of2" for h in pages for rank in (0, 1)]  # both ranks' shards
        assert store.put_batch(keys, [parts(k) for k in keys]) == [True] * len(keys)
        want = [hash_str_to_int64(h) for h in pages]
        end = time.monotonic() + 10
        while time.monotonic() < end:
            pump(0.1)
            got = [h for e in events if type(e) is BlockStored for h in e.block_hashes]
            if set(want) <= set(got):
                break
        stored = [e for e in events if type(e) is BlockStored]
        got = [h for e in stored for h in e.block_hashes if h in want]
        assert sorted(got) == sorted(want)  # once per page, not once per rank
        assert {e.medium for e in stored} == {StorageMedium.CPU.value}
    finally:
        sub.close(linger=0)
        store.close()
