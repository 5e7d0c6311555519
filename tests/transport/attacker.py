"""A connection flooder (run as a script by the tests): keeps ``count`` sockets open against a
node from the given source addresses and reopens each one the node drops, at most ``rate`` new
sockets per second, until killed. Writes its counters to ``STATS`` (JSON) every 0.2 s.

    python attacker.py HOST PORT MODE COUNT RATE STATS SRC [SRC ...]

MODE ``preauth``: never authenticate (half the sockets stay silent, half send a partial AUTH
header and stall). MODE ``idle:SECRET``: authenticate, then sit idle.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import socket
import sys
import time

from hicache_mooncake.transport import auth, wire

PARTIAL_AUTH = wire.pack_header(wire.FrameHeader(wire.Op.AUTH, 0, 1, auth.PROOF_LEN + auth.NONCE_LEN, 0))[:10]


def authenticate(sock: socket.socket, secret: bytes) -> None:
    h = wire.unpack_header(sock.recv(wire.HEADER_SIZE, socket.MSG_WAITALL), wire.Limits())
    nonce = sock.recv(h.meta_len, socket.MSG_WAITALL)
    proof = auth.client_proof(secret, nonce) + auth.new_nonce()
    sock.sendall(wire.pack_header(wire.FrameHeader(wire.Op.AUTH, 0, 1, len(proof), 0)) + proof)
    h = wire.unpack_header(sock.recv(wire.HEADER_SIZE, socket.MSG_WAITALL), wire.Limits())
    if h.status != wire.Status.OK:
        raise OSError("authentication refused")
    sock.recv(h.meta_len, socket.MSG_WAITALL)


def main() -> None:
    host, port, mode, count, rate, stats_path = sys.argv[1:7]
    sources = sys.argv[7:]
    secret = mode.split(":", 1)[1].encode() if mode.startswith("idle:") else None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()
    stats = {"open": 0, "max_open": 0, "opened": 0, "dropped_by_node": 0, "connect_failed": 0}
    budget, last, last_dump, n = 0.0, time.monotonic(), 0.0, 0
    while True:
        now = time.monotonic()
        budget = min(budget + (now - last) * float(rate), float(rate))
        last = now
        while stats["open"] < int(count) and budget >= 1:
            budget -= 1
            s = socket.socket()
            try:
                s.bind((sources[n % len(sources)], 0))
                n += 1
                s.settimeout(1.0)
                s.connect((host, int(port)))
                if secret is not None:
                    authenticate(s, secret)
                elif n % 2:
                    s.sendall(PARTIAL_AUTH)
                s.setblocking(False)
            except OSError:
                stats["connect_failed"] += 1
                s.close()
                continue
            sel.register(s, selectors.EVENT_READ)
            stats["open"] += 1
            stats["opened"] += 1
        stats["max_open"] = max(stats["max_open"], stats["open"])
        for key, _ in sel.select(0.02):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:  # the node dropped it: reopen (within the rate)
                sel.unregister(sock)
                sock.close()
                stats["open"] -= 1
                stats["dropped_by_node"] += 1
        if now - last_dump > 0.2:
            last_dump = now
            with open(stats_path + ".tmp", "w") as f:
                json.dump(stats, f)
            os.replace(stats_path + ".tmp", stats_path)


if __name__ == "__main__":
    main()
