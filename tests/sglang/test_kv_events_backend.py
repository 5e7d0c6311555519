"""KV events from the backend SGLang builds (issue 47): ``events.endpoint`` in the extra config
makes the first rank publish what ``batch_set_v1`` stores, under the block hashes SGLang publishes
for the same pages, with the page size; a clear is ``AllBlocksCleared``; close frees the socket."""

from __future__ import annotations

import socket
import time
from typing import Any

import msgspec
import pytest
import zmq
from sglang.srt.disaggregation.kv_events import AllBlocksCleared, BlockStored, KVEventBatch, StorageMedium
from sglang.srt.mem_cache.utils import hash_str_to_int64
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake.kv_events.attach import offset_endpoint
from hicache_mooncake.kv_events.publisher import KvEventPublisher

pytestmark = pytest.mark.sglang
DECODE = msgspec.msgpack.Decoder(KVEventBatch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hashes(n: int, tag: str) -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


def test_the_backend_publishes_what_sglang_stores_and_clears() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    extra = small_extra()
    extra["events"] = {"endpoint": endpoint, "topic": "w0", "flush_interval_s": 0.01}
    backend, host = make_backend(extra=extra)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt_string(zmq.SUBSCRIBE, "w0")
    sub.connect(endpoint)
    events: list[Any] = []

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and sub.poll(int(left * 1000)):
            _topic, _seq, payload = sub.recv_multipart()
            events.extend(DECODE.decode(payload).events)

    try:
        for i in range(200):  # ZMQ's slow joiner: store probe pages until one is seen
            assert backend.batch_set_v1(hashes(1, f"{i:x}"), host.alloc(SMALL.page_size)) == [True]
            pump(0.05)
            if events:
                break
        keys = hashes(4, "b")
        assert backend.batch_set_v1(keys, host.alloc(4 * SMALL.page_size)) == [True] * 4
        backend.clear()
        want = {hash_str_to_int64(k) for k in keys}
        end = time.monotonic() + 10
        while not any(type(e) is AllBlocksCleared for e in events) and time.monotonic() < end:
            pump(0.1)
        stored = [e for e in events if type(e) is BlockStored]
        assert want <= {h for e in stored for h in e.block_hashes}
        assert {e.medium for e in stored} == {StorageMedium.CPU.value}  # the default YAML's DRAM tier
        assert {e.block_size for e in stored} == {SMALL.page_size}
        assert any(type(e) is AllBlocksCleared for e in events)
    finally:
        sub.close(linger=0)
        backend.close()
    KvEventPublisher(endpoint).close()  # close released the endpoint: it binds again


def test_only_the_first_rank_publishes_and_dp_ranks_offset_the_port() -> None:
    extra = small_extra()
    extra["events"] = {"endpoint": f"tcp://127.0.0.1:{free_port()}"}
    backend, _host = make_backend(extra=extra, tp_rank=1, tp_size=2)
    try:
        assert backend.events is None  # rank 0 reports the page, as SGLang's own publisher
    finally:
        backend.close()
    assert offset_endpoint("tcp://*:5600", 3) == "tcp://*:5603"
    assert offset_endpoint("ipc:///run/ev", 1) == "ipc:///run/ev_dp1"
