"""A hostile "memory node" (run as a script by the tests): it speaks the wire protocol and knows
the shared secret, but its handshake names a file of its choosing as its shared-memory arena and
it grants every ALLOC at offset 0, so a client that trusts it would write KV bytes into that file.

    python fake_node.py READY_FILE SECRET SHM_PATH ARENA_SIZE [NODE_ID EPOCH TOKEN_HEX]
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

from hicache_mooncake.transport import auth, wire
from hicache_mooncake.transport.node.served_store import RESERVED_NEW
from hicache_mooncake.transport.sockio import recv_exact, send_all
from hicache_mooncake.transport.wire import FrameHeader, Op, Status

LIMITS = wire.Limits()


def reply(sock: socket.socket, op: int, req_id: int, meta: bytes, status: int = Status.OK) -> None:
    send_all(sock, [memoryview(wire.pack_header(FrameHeader(op, status, req_id, len(meta), 0))), meta], None)


def serve(sock: socket.socket, secret: bytes, info: bytes) -> None:
    nonce = auth.new_nonce()
    reply(sock, Op.CHALLENGE, 0, nonce)
    h = wire.unpack_header(recv_exact(sock, wire.HEADER_SIZE, None), LIMITS)
    meta = recv_exact(sock, h.meta_len, None)
    proof = auth.server_proof(secret, bytes(meta[auth.PROOF_LEN :]))
    reply(sock, Op.AUTH, h.req_id, proof + info)
    while True:
        h = wire.unpack_header(recv_exact(sock, wire.HEADER_SIZE, None), LIMITS)
        meta = recv_exact(sock, h.meta_len, None)
        recv_exact(sock, h.payload_len, None)
        if h.op == Op.ALLOC:
            items = wire.decode_put(meta, None, LIMITS)
            records = wire.alloc_records(len(items))
            records["status"], records["version"] = RESERVED_NEW, 1
            out = wire.encode_alloc_records(records)
        elif h.op == Op.COMMIT:
            out = wire.encode_flags([True] * len(wire.decode_commit(meta, LIMITS)))
        elif h.op == Op.LOOKUP:
            out = wire.encode_lookup_records(wire.lookup_records(len(wire.decode_get(meta, LIMITS))))
        elif h.op in (Op.EXISTS, Op.REMOVE):
            out = wire.encode_flags([False] * len(wire.decode_keys(meta, LIMITS)))
        else:
            out = b"{}"
        reply(sock, h.op, h.req_id, out)


def main() -> None:
    ready, secret, shm_path, size = sys.argv[1], sys.argv[2].encode(), sys.argv[3], int(sys.argv[4])
    node_id, epoch, token = (sys.argv[5:8] + ["fake", "1", "00" * 16][len(sys.argv[5:8]) :])[:3]
    info = json.dumps(
        {
            "node_id": node_id,
            "epoch": int(epoch),
            "arena_size": size,
            "shm_path": shm_path,
            "arena_token": token,
        }
    ).encode()
    listener = socket.create_server(("127.0.0.1", 0))
    with open(ready + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.replace(ready + ".tmp", ready)
    while True:
        sock, _ = listener.accept()
        threading.Thread(target=lambda s=sock: _guarded(s, secret, info), daemon=True).start()


def _guarded(sock: socket.socket, secret: bytes, info: bytes) -> None:
    try:
        serve(sock, secret, info)
    except Exception:
        pass
    finally:
        sock.close()


if __name__ == "__main__":
    main()
