"""``KvEventPublisher``: an ``EventsSink`` that publishes the tiers' events as SGLang does.

Wire format (SGLang's ``ZmqEventPublisher``): each message is three frames, ``topic``, the
sequence number (8 bytes, big-endian, from 0) and a msgpack ``KVEventBatch``; the optional replay
ROUTER answers a request ``[identity, b"", start_seq (8 bytes)]`` with every buffered batch from
``start_seq`` on (``[identity, b"", topic, seq, payload]``), then ``[identity, b"", b"",
END_SEQ, b""]``.

Invariants:
- the data path (``stored`` / ``removed`` / ``cleared``, called by the tiers, some under their
  lock) only appends to a queue under a short lock: it never waits for the publisher thread, the
  socket or a subscriber. When the queue holds ``max_queue`` keys, a call's keys are dropped and
  counted (``dropped_keys``), removals and clears only past twice that (a lost store makes a
  router under-count what is held, a lost removal would make it over-count); a subscriber that does not read loses messages at the PUB socket's
  high-water mark (ZMQ drops them; the socket never blocks).
- one thread (``hicache-kv-events``) owns the sockets: it wakes every ``flush_interval_s`` (or as
  soon as ``batch_max`` keys wait), turns keys into block hashes (``block_ids``), merges
  consecutive events of one kind and medium, and sends batches of at most ``batch_max`` hashes in
  the order the tiers reported them.
- ``close`` publishes what is queued (bounded by ``close_timeout_s``) and closes the sockets; it
  is idempotent and never raises.
- consecutive clears (one per tier of a store's clear) are published as one ``AllBlocksCleared``.
- medium per tier: ``dram`` (our host DRAM tier, in this process or the host cache service's
  shared memory) -> ``CPU_PINNED`` (or ``EXTERNAL``: ``events.dram_medium``); ``ssd`` -> ``DISK``; a pool tier (``remote``: memory nodes,
  Mooncake Store) -> ``EXTERNAL``. ``AllBlocksCleared`` has no medium in SGLang's schema: a clear
  of any tier is published as one, so a consumer forgets this publisher's blocks; it may then
  under-count what is held, never over-count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec
import zmq

from .block_ids import block_id
from .schema import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch, StorageMedium

log = logging.getLogger(__name__)

MEDIUM_OF_TIER = {"dram": StorageMedium.CPU.value, "ssd": StorageMedium.DISK.value}
"""Medium of a tier's events by tier name (``dram`` as ``events.dram_medium`` says); any other tier
(a pool) is ``EXTERNAL``."""
REPLAY_BATCHES = 1024
"""Batches kept for the replay socket."""
END_SEQ = (-1).to_bytes(8, "big", signed=True)
_STORED, _REMOVED, _CLEARED = 0, 1, 2
_HWM = 100_000


def medium_of(tier: str, dram_medium: str = StorageMedium.CPU.value) -> str:
    if tier == "dram":
        return dram_medium
    return MEDIUM_OF_TIER.get(tier, StorageMedium.EXTERNAL.value)


class KvEventPublisher:
    """Publishes what the tiers report (module docstring). ``block_size``: tokens per page, written
    in ``BlockStored.block_size`` (0 until known: ``block_size`` may be set later); ``dp_rank``:
    ``KVEventBatch.attn_dp_rank``; ``dram_medium``: the medium of the ``dram`` tier. Raises
    ``ValueError`` naming the endpoint when a socket cannot bind."""

    def __init__(
        self,
        endpoint: str,
        topic: str = "",
        replay_endpoint: str = "",
        max_queue: int = 100_000,
        batch_max: int = 1024,
        flush_interval_s: float = 0.05,
        dp_rank: int = 0,
        block_size: int = 0,
        dram_medium: str = StorageMedium.CPU.value,
        close_timeout_s: float = 2.0,
    ) -> None:
        self.block_size = block_size
        self.dram_medium = dram_medium
        self.dp_rank = dp_rank
        self._topic = topic.encode()
        self._max_queue = max_queue
        self._batch_max = batch_max
        self._interval = flush_interval_s
        self._close_timeout_s = close_timeout_s
        self._lock = threading.Lock()
        self._queue: deque[tuple[int, str, Sequence[str]]] = deque()
        self._queued = 0  # keys in _queue (a clear counts 1)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self.counts: dict[str, int] = dict.fromkeys(
            ("queued_keys", "dropped_keys", "published_batches", "published_events", "send_dropped"), 0
        )
        self._replay_buffer: deque[tuple[int, bytes]] = deque(maxlen=REPLAY_BATCHES)
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, _HWM)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay: zmq.Socket[bytes] | None = None
        try:
            self._pub.bind(endpoint)
            self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
            self.replay_endpoint = ""
            if replay_endpoint:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                try:
                    self._replay.bind(replay_endpoint)
                except zmq.ZMQError as exc:
                    raise ValueError(f"events.replay_endpoint {replay_endpoint!r}: {exc}") from None
                self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError as exc:
            self._close_sockets()
            raise ValueError(f"events.endpoint {endpoint!r}: {exc}") from None
        except BaseException:
            self._close_sockets()
            raise
        self._seq = 0
        self._cleared_last = False  # the last event published was AllBlocksCleared
        self._encoder = msgspec.msgpack.Encoder()
        self._thread = threading.Thread(target=self._run, name="hicache-kv-events", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ EventsSink (the data path)
    def stored(self, tier: str, keys: Sequence[str]) -> None:
        self._put(_STORED, tier, keys, len(keys))

    def removed(self, tier: str, keys: Sequence[str]) -> None:
        self._put(_REMOVED, tier, keys, len(keys))

    def cleared(self, tier: str) -> None:
        self._put(_CLEARED, tier, (), 1)

    def _put(self, kind: int, tier: str, keys: Sequence[str], n: int) -> None:
        if not n:
            return
        # removals and clears may use a second max_queue: a slow publisher then loses stores first,
        # so a router under-counts what is held (a missed chance) rather than over-counts (a miss)
        limit = self._max_queue if kind == _STORED else 2 * self._max_queue
        with self._lock:
            if self._closed or self._queued + n > limit:
                self.counts["dropped_keys"] += n
                return
            self._queue.append((kind, tier, keys))
            self._queued += n
            self.counts["queued_keys"] += n
            full = self._queued >= self._batch_max
        if full and not self._wake.is_set():
            self._wake.set()

    # ------------------------------------------------------------------ the publisher thread
    def _take(self) -> list[tuple[int, str, Sequence[str]]]:
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            self._queued = 0
        return items

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self._serve_replay()
                self._publish(self._take())
            except Exception:  # a bug here must not kill the thread, nor reach the data path
                log.exception("kv events: publishing failed")
                time.sleep(self._interval)
        try:
            self._publish(self._take())
        except Exception:
            log.exception("kv events: publishing at close failed")

    def _events(self, items: list[tuple[int, str, Sequence[str]]]) -> list[Any]:
        """Consecutive events of one kind and medium merged; keys that are not published dropped."""
        events: list[Any] = []
        last: tuple[int, str] | None = (_CLEARED, "") if self._cleared_last else None
        for kind, tier, keys in items:
            if kind == _CLEARED:
                if last != (_CLEARED, ""):
                    events.append(AllBlocksCleared())
                    last = (_CLEARED, "")
                continue
            ids = [i for i in map(block_id, keys) if i is not None]
            if not ids:
                continue
            medium = medium_of(tier, self.dram_medium)
            if last == (kind, medium):
                events[-1].block_hashes.extend(ids)
            elif kind == _STORED:
                events.append(BlockStored(ids, None, [], self.block_size, None, medium))
            else:
                events.append(BlockRemoved(ids, medium))
            last = (kind, medium)
        self._cleared_last = last == (_CLEARED, "")
        return events

    def _publish(self, items: list[tuple[int, str, Sequence[str]]]) -> None:
        """Send the events of ``items`` in batches of at most ``batch_max`` block hashes (an event
        with more is split across batches, in order)."""
        batch: list[Any] = []
        size = 0
        for event in self._events(items):
            hashes = getattr(event, "block_hashes", None)
            if hashes is None:
                if size >= self._batch_max:
                    self._send(batch)
                    batch, size = [], 0
                batch.append(event)
                size += 1
                continue
            start = 0
            while start < len(hashes):
                if size >= self._batch_max:
                    self._send(batch)
                    batch, size = [], 0
                part = hashes[start : start + self._batch_max - size]
                batch.append(event if len(part) == len(hashes) else _with_hashes(event, part))
                size += len(part)
                start += len(part)
        if batch:
            self._send(batch)

    def _send(self, events: list[Any]) -> None:
        payload = self._encoder.encode(KVEventBatch(time.time(), events, self.dp_rank))
        seq = self._seq.to_bytes(8, "big")
        self._seq += 1
        try:
            self._pub.send_multipart((self._topic, seq, payload), flags=zmq.NOBLOCK)
        except zmq.Again:
            self.counts["send_dropped"] += 1
        self._replay_buffer.append((int.from_bytes(seq, "big"), payload))
        self.counts["published_batches"] += 1
        self.counts["published_events"] += len(events)

    def _serve_replay(self) -> None:
        replay = self._replay
        if replay is None:
            return
        while replay.poll(0):
            frames = replay.recv_multipart()
            if len(frames) != 3:
                log.warning("kv events: a replay request of %d frames ignored (3 expected)", len(frames))
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in list(self._replay_buffer):
                if seq >= first:
                    replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
            replay.send_multipart((client, b"", b"", END_SEQ, b""))

    # ------------------------------------------------------------------ lifecycle
    def stats(self) -> dict[str, Any]:
        with self._lock:
            queued = self._queued
        return {"endpoint": self.endpoint, "queue_keys": queued, **self.counts}

    def close(self) -> None:
        """Publish what is queued (bounded), then close the sockets. Idempotent; never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._wake.set()
        self._thread.join(self._close_timeout_s)
        if not self._thread.is_alive():
            self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._pub, self._replay):
            if sock is not None:
                try:
                    sock.close(linger=0)
                except Exception:
                    log.debug("kv events: closing a socket failed", exc_info=True)


def _with_hashes(event: Any, hashes: list[int]) -> Any:
    if isinstance(event, BlockStored):
        return BlockStored(hashes, None, [], event.block_size, None, event.medium)
    return BlockRemoved(hashes, event.medium)
