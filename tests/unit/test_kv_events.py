"""KV events for routers (issue 47): a real ZMQ SUB socket on loopback receives, decoded with
SGLang's own decoder, what a real store (DRAM tier + SSD tier on real files) stores, evicts,
demotes and clears, with the medium of each tier, and the data path never waits for it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
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
from hicache_mooncake.kv_events.attach import start_publisher
from hicache_mooncake.kv_events.block_ids import block_id
from hicache_mooncake.kv_events.publisher import KvEventPublisher
from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAGE = 64 << 10
MiB = 1 << 20
DECODE = msgspec.msgpack.Decoder(KVEventBatch)  # SGLang's own schema
DRAM, DISK = StorageMedium.CPU.value, StorageMedium.DISK.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sha(i: int, tag: str = "p") -> str:
    """A page hash as SGLang hands it to ``batch_set_v1`` (64 hex digits)."""
    import hashlib

    return hashlib.sha256(f"{tag}{i}".encode()).hexdigest()


def key(page_hash: str) -> str:
    return f"model/0123456789abcdef/{page_hash}@tp0of1"


def parts_of(k: str) -> list[memoryview]:
    arr = np.frombuffer(k.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()
    return [memoryview(arr[: PAGE // 2]), memoryview(arr[PAGE // 2 :])]


def put(store: TieredStore, keys: list[str]) -> list[bool]:
    return store.put_batch(keys, [parts_of(k) for k in keys])


class Subscriber:
    """A real SUB socket; ``events`` holds every decoded event, in order."""

    def __init__(self, endpoint: str, topic: str = "") -> None:
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.sock.connect(endpoint)
        self.events: list[Any] = []
        self.seqs: list[int] = []

    def pump(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while (left := end - time.monotonic()) > 0 and self.sock.poll(int(left * 1000)):
            topic, seq, payload = self.sock.recv_multipart()
            self.seqs.append(int.from_bytes(seq, "big"))
            batch = DECODE.decode(payload)
            self.events.extend(batch.events)

    def wait_for(self, pred: Callable[[list[Any]], bool], timeout_s: float = 10.0) -> None:
        end = time.monotonic() + timeout_s
        while not pred(self.events) and time.monotonic() < end:
            self.pump(0.1)
        assert pred(self.events), f"events received: {self.events}"

    def hashes(self, cls: type, medium: str) -> set[int]:
        return {h for e in self.events if type(e) is cls and e.medium == medium for h in e.block_hashes}


def settled(sub: Subscriber, publisher: KvEventPublisher, timeout_s: float = 20.0) -> None:
    """Receive until the publisher's queue is empty and two quiet rounds pass."""
    end = time.monotonic() + timeout_s
    quiet = 0
    while quiet < 2 and time.monotonic() < end:
        before = len(sub.events)
        sub.pump(0.25)
        idle = len(sub.events) == before and publisher.stats()["queue_keys"] == 0
        quiet = quiet + 1 if idle else 0


def joined(sub: Subscriber, store: TieredStore) -> None:
    """Wait out ZMQ's slow joiner: store probe pages until the subscriber sees one."""
    for i in range(200):
        put(store, [key(sha(i, "probe"))])
        sub.pump(0.05)
        if sub.events:
            return
    raise AssertionError("the subscriber never received an event")


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., tuple[TieredStore, KvEventPublisher, Subscriber]]]:
    made: list[tuple[TieredStore, KvEventPublisher, Subscriber]] = []

    def make(
        dram_mib: int = 2, ssd_mib: int = 8, **cfg: Any
    ) -> tuple[TieredStore, KvEventPublisher, Subscriber]:
        tiers: list[Any] = [DramTier(dram_mib * MiB, MiB, prefault=False)]
        if ssd_mib:
            d = tmp_path / f"ssd{len(made)}"
            d.mkdir()
            opts = SsdOptions(dirs=(str(d),), capacity_bytes=ssd_mib * MiB, region_size=MiB, direct_io="off")
            tiers.append(SsdTier(SsdEngine(opts)))
        store = TieredStore(tiers, lambda: make_policy("lru"), StoreOptions())
        config = EventsConfig(endpoint=f"tcp://127.0.0.1:{free_port()}", **cfg)
        publisher = start_publisher(config, store, block_size=16)
        assert publisher is not None
        sub = Subscriber(publisher.endpoint, config.topic)
        made.append((store, publisher, sub))
        return store, publisher, sub

    yield make
    for store, publisher, sub in made:
        store.close()
        publisher.close()
        sub.sock.close(linger=0)


def test_sets_are_block_stored_under_the_hash_sglang_publishes(make_store: Callable[..., Any]) -> None:
    store, publisher, sub = make_store(topic="kv@worker0")
    joined(sub, store)
    hashes = [sha(i) for i in range(6)]
    assert put(store, [key(h) for h in hashes]) == [True] * 6
    want = {hash_str_to_int64(h) for h in hashes}  # SGLang's id of the same page
    sub.wait_for(lambda ev: want <= sub.hashes(BlockStored, DRAM))
    stored = [e for e in sub.events if type(e) is BlockStored]
    assert all(e.block_size == 16 and e.token_ids == [] and e.parent_block_hash is None for e in stored)
    assert sub.seqs == sorted(sub.seqs) and len(set(sub.seqs)) == len(sub.seqs)
    assert publisher.stats()["dropped_keys"] == 0


def test_demotions_move_blocks_from_dram_to_disk_and_evictions_remove_them(
    make_store: Callable[..., Any],
) -> None:
    store, publisher, sub = make_store(dram_mib=2, ssd_mib=4)
    joined(sub, store)
    hashes = [sha(i) for i in range(150)]  # 150 pages of 64 KiB: DRAM holds ~28, SSD ~56
    for i in range(0, len(hashes), 10):
        put(store, [key(h) for h in hashes[i : i + 10]])
    store.flush()
    ids = {hash_str_to_int64(h) for h in hashes}
    # demotion: an early page is stored on DISK and removed from host DRAM
    sub.wait_for(lambda ev: len(ids & sub.hashes(BlockStored, DISK)) >= 20)
    sub.wait_for(lambda ev: len(ids & sub.hashes(BlockRemoved, DRAM)) >= 20)
    demoted = ids & sub.hashes(BlockStored, DISK) & sub.hashes(BlockRemoved, DRAM)
    assert demoted
    # eviction: the host cannot hold 150 pages, so pages leave the SSD too
    sub.wait_for(lambda ev: len(ids & sub.hashes(BlockRemoved, DISK)) >= 10)
    # what the subscriber believes is held is what the store holds, once everything is published
    settled(sub, publisher)
    held = {m: set() for m in (DRAM, DISK)}  # type: dict[str, set[int]]
    for e in sub.events:
        if type(e) in (BlockStored, BlockRemoved):
            for h in e.block_hashes:
                (held[e.medium].add if type(e) is BlockStored else held[e.medium].discard)(h)
    in_dram = {hash_str_to_int64(h) for h in hashes if store.dram is not None and store.dram.contains(key(h))}
    in_ssd = {hash_str_to_int64(h) for h in hashes if store.ssd is not None and store.ssd.contains(key(h))}
    assert held[DRAM] & ids == in_dram
    assert held[DISK] & ids == in_ssd


def test_clear_is_all_blocks_cleared(make_store: Callable[..., Any]) -> None:
    store, _publisher, sub = make_store()
    joined(sub, store)
    put(store, [key(sha(i)) for i in range(4)])
    store.clear()
    put(store, [key(sha(9))])
    sub.wait_for(lambda ev: hash_str_to_int64(sha(9)) in sub.hashes(BlockStored, DRAM))
    kinds = [type(e) for e in sub.events]
    cleared_at = kinds.index(AllBlocksCleared)
    assert kinds.count(AllBlocksCleared) == 1  # one per clear, whatever the number of tiers
    last_store = max(
        i for i, e in enumerate(sub.events) if hash_str_to_int64(sha(9)) in getattr(e, "block_hashes", ())
    )
    assert last_store > cleared_at


def test_four_threads_of_sets_and_gets_every_stored_page_is_published(make_store: Callable[..., Any]) -> None:
    store, publisher, sub = make_store(dram_mib=16, ssd_mib=0, batch_max=64)
    joined(sub, store)
    errors: list[BaseException] = []

    def load(t: int) -> None:
        try:
            for r in range(20):
                keys = [key(sha(t * 1000 + r * 10 + p)) for p in range(5)]
                assert put(store, keys) == [True] * 5
                bufs = [parts_of("x" * 8) for _ in keys]
                assert store.get_batch_into(keys, bufs) == [True] * 5
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    want = {
        hash_str_to_int64(sha(t * 1000 + r * 10 + p)) for t in range(4) for r in range(20) for p in range(5)
    }
    sub.wait_for(lambda ev: want <= sub.hashes(BlockStored, DRAM))
    sizes = [len(e.block_hashes) for e in sub.events if type(e) is BlockStored]
    assert max(sizes) <= 64
    assert publisher.stats()["dropped_keys"] == 0


def test_a_full_queue_drops_and_counts_and_the_data_path_never_waits(make_store: Callable[..., Any]) -> None:
    # the publisher thread publishes only every 30 s and the subscriber never reads: the queue
    # fills after 40 keys, and every later set drops its events instead of waiting
    store, publisher, _sub = make_store(
        dram_mib=16, ssd_mib=0, max_queue=40, flush_interval_s=30, batch_max=1000
    )
    started = time.monotonic()
    for i in range(50):
        assert put(store, [key(sha(i * 4 + p, "full")) for p in range(4)]) == [True] * 4
    elapsed = time.monotonic() - started
    stats = publisher.stats()
    assert stats["queue_keys"] == 40
    assert stats["dropped_keys"] == 200 - 40
    assert elapsed < 5.0  # 50 sets; a set that waited for the publisher would wait 30 s
    assert store.remove(key(sha(0, "full")))  # a removal still finds room: it is kept over stores
    assert publisher.stats()["queue_keys"] == 41 and publisher.stats()["dropped_keys"] == 160


def test_replay_returns_missed_batches_in_sglang_s_protocol(make_store: Callable[..., Any]) -> None:
    port = free_port()
    store, publisher, _sub = make_store(replay_endpoint=f"tcp://127.0.0.1:{port}")
    put(store, [key(sha(i)) for i in range(3)])  # nobody subscribed: only the replay buffer has it
    deadline = time.monotonic() + 10
    while publisher.stats()["published_batches"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    req = zmq.Context.instance().socket(zmq.DEALER)
    req.setsockopt(zmq.LINGER, 0)
    try:
        req.connect(publisher.replay_endpoint)
        req.send_multipart((b"", (0).to_bytes(8, "big")))
        events: list[Any] = []
        while True:
            assert req.poll(10_000), "no replay answer"
            _empty, _topic, seq, payload = req.recv_multipart()
            if seq == (-1).to_bytes(8, "big", signed=True):
                break
            events.extend(DECODE.decode(payload).events)
    finally:
        req.close(linger=0)
    got = {h for e in events if type(e) is BlockStored for h in e.block_hashes}
    assert {hash_str_to_int64(sha(i)) for i in range(3)} <= got


def test_only_kv_pages_of_the_first_shard_are_published() -> None:
    h = sha(1)
    assert block_id(f"m/d/{h}@tp0of2") == hash_str_to_int64(h)
    assert block_id(f"m/d/{h}") == hash_str_to_int64(h)  # MLA: replicated, no rank suffix
    assert block_id(f"m/d~tenant/{h}@tp0of2@pp0of2") == hash_str_to_int64(h)
    assert block_id(f"m/d/{h}@tp1of2") is None
    assert block_id(f"m/d/{h}@hg1of4") is None
    assert block_id(f"m/d/{h}.mamba~0a1b2c@tp0of1") is None  # a sidecar pool's object
    assert block_id(f"m/d/{h}@tp0of1#0of2") == hash_str_to_int64(h)
    assert block_id(f"m/d/{h}@tp0of1#1of2") is None
    opaque = block_id("m/d/not-sglang@tp0of1")  # a key a tool or a test wrote: a stable opaque id
    assert opaque is not None and opaque == block_id("x/y/not-sglang") and -(1 << 63) <= opaque < 1 << 63


def test_a_taken_endpoint_is_refused_naming_the_key() -> None:
    holder = KvEventPublisher(f"tcp://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ValueError, match="events.endpoint"):
            KvEventPublisher(holder.endpoint)
    finally:
        holder.close()


def test_the_subscriber_module_prints_the_events(make_store: Callable[..., Any]) -> None:
    import subprocess
    import sys

    store, publisher, _sub = make_store(replay_endpoint=f"tcp://127.0.0.1:{free_port()}")
    put(store, [key(sha(i)) for i in range(3)])
    deadline = time.monotonic() + 10
    while publisher.stats()["published_batches"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    cmd = [sys.executable, "-m", "hicache_mooncake.kv_events.subscriber", publisher.endpoint]
    cmd += ["--replay-endpoint", publisher.replay_endpoint, "--count", "1", "--seconds", "30"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"BlockStored medium={DRAM} n=3 {hash_str_to_int64(sha(0))}" in done.stdout, done.stdout


def test_what_the_ssd_recovered_at_start_is_announced(tmp_path: Path) -> None:
    """A restarted host: the SSD tier's pages found on disk are BlockStored DISK when the publisher
    starts (read back through the replay socket: nobody was subscribed yet)."""
    opts = SsdOptions(dirs=(str(tmp_path),), capacity_bytes=8 * MiB, region_size=MiB, direct_io="off")
    first = TieredStore([SsdTier(SsdEngine(opts))], lambda: make_policy("lru"), StoreOptions())
    hashes = [sha(i, "disk") for i in range(5)]
    assert put(first, [key(h) for h in hashes]) == [True] * 5
    first.close()
    store = TieredStore([SsdTier(SsdEngine(opts))], lambda: make_policy("lru"), StoreOptions())
    config = EventsConfig(
        endpoint=f"tcp://127.0.0.1:{free_port()}", replay_endpoint=f"tcp://127.0.0.1:{free_port()}"
    )
    publisher = start_publisher(config, store)
    assert publisher is not None
    req = zmq.Context.instance().socket(zmq.DEALER)
    req.setsockopt(zmq.LINGER, 0)
    try:
        deadline = time.monotonic() + 10
        while publisher.stats()["published_batches"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        req.connect(publisher.replay_endpoint)
        req.send_multipart((b"", (0).to_bytes(8, "big")))
        events: list[Any] = []
        while True:
            assert req.poll(10_000), "no replay answer"
            _empty, _topic, seq, payload = req.recv_multipart()
            if seq == (-1).to_bytes(8, "big", signed=True):
                break
            events.extend(DECODE.decode(payload).events)
    finally:
        req.close(linger=0)
        store.close()
        publisher.close()
    got = {h for e in events if type(e) is BlockStored and e.medium == DISK for h in e.block_hashes}
    assert {hash_str_to_int64(h) for h in hashes} <= got


def test_dram_medium_external_for_consumers_that_merge_sglang_s_own_stream(
    make_store: Callable[..., Any],
) -> None:
    store, _publisher, sub = make_store(dram_mib=2, ssd_mib=8, dram_medium="EXTERNAL")
    joined(sub, store)
    hashes = [sha(i, "ext") for i in range(40)]  # more than DRAM holds: some are demoted to DISK
    for i in range(0, len(hashes), 10):
        put(store, [key(h) for h in hashes[i : i + 10]])
    ids = {hash_str_to_int64(h) for h in hashes}
    sub.wait_for(lambda ev: ids <= sub.hashes(BlockStored, StorageMedium.EXTERNAL.value))
    sub.wait_for(lambda ev: bool(ids & sub.hashes(BlockStored, DISK)))
    assert not sub.hashes(BlockStored, DRAM) & ids  # CPU_PINNED stays SGLang's host pool's
