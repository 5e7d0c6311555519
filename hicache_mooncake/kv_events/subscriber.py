"""Print the KV events a publisher sends: ``python -m hicache_mooncake.kv_events.subscriber ENDPOINT``.

Connects a ZMQ SUB socket to ``ENDPOINT`` (the ``events.endpoint`` of a backend or of the host
cache service, or SGLang's own ``--kv-events-config`` endpoint: the format is the same), decodes
each ``KVEventBatch`` and prints one line per event: sequence number, event type, medium and block
hashes. ``--replay-endpoint`` first asks the replay socket for the batches from ``--from-seq`` on.
Stops after ``--count`` events or ``--seconds`` (0: never), or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

import msgspec
import zmq

from hicache_mooncake.kv_events.publisher import END_SEQ
from hicache_mooncake.kv_events.schema import KVEventBatch

_DECODE = msgspec.msgpack.Decoder(KVEventBatch)


def describe(seq: int, event: Any) -> str:
    kind = type(event).__name__
    hashes = getattr(event, "block_hashes", None)
    if hashes is None:
        return f"{seq} {kind}"
    shown = " ".join(str(h) for h in hashes[:8]) + (f" ... (+{len(hashes) - 8})" if len(hashes) > 8 else "")
    return f"{seq} {kind} medium={event.medium} n={len(hashes)} {shown}"


def print_batch(seq: int, payload: bytes, out: TextIO) -> int:
    batch = _DECODE.decode(payload)
    for event in batch.events:
        print(describe(seq, event), file=out, flush=True)
    return len(batch.events)


def replay(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, first: int, out: TextIO) -> int:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    printed = 0
    try:
        sock.connect(endpoint)
        sock.send_multipart((b"", first.to_bytes(8, "big")))
        while sock.poll(5000):
            _empty, _topic, seq, payload = sock.recv_multipart()
            if seq == END_SEQ:
                break
            printed += print_batch(int.from_bytes(seq, "big"), payload, out)
    finally:
        sock.close()
    return printed


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hicache_mooncake.kv_events.subscriber", description=__doc__
    )
    parser.add_argument("endpoint", help="the publisher's endpoint, e.g. tcp://127.0.0.1:5600")
    parser.add_argument("--topic", default="", help="events.topic of the publisher")
    parser.add_argument(
        "--replay-endpoint", default="", help="events.replay_endpoint: print missed batches first"
    )
    parser.add_argument("--from-seq", type=int, default=0, help="first sequence number to replay")
    parser.add_argument("--count", type=int, default=0, help="stop after this many events (0: never)")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: never)")
    args = parser.parse_args(argv)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt_string(zmq.SUBSCRIBE, args.topic)
    sub.connect(args.endpoint)
    printed = replay(ctx, args.replay_endpoint, args.from_seq, out) if args.replay_endpoint else 0
    end = time.monotonic() + args.seconds if args.seconds > 0 else None
    try:
        while not args.count or printed < args.count:
            wait_ms = 200 if end is None else max(0, int((end - time.monotonic()) * 1000))
            if sub.poll(min(wait_ms, 200)):
                _topic, seq, payload = sub.recv_multipart()
                printed += print_batch(int.from_bytes(seq, "big"), payload, out)
            elif end is not None and time.monotonic() >= end:
                break
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
