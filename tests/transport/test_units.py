"""Unit tests that start no process: wire format, rendezvous, embedded metadata, and
the device-free parts of the RDMA backend. (The store a node serves: tests/unit/test_arena_store.py.)"""

from __future__ import annotations

import ctypes
import itertools
import struct
import time
from collections.abc import Sequence

import pytest

from hicache_mooncake.transport import wire
from hicache_mooncake.transport.errors import ProtocolError, TransportError
from hicache_mooncake.transport.metadata import EmbeddedMetadata, NodeInfo, home_of, route
from hicache_mooncake.transport.rdma.handshake import QPINFO_SIZE, QpInfo
from hicache_mooncake.transport.rdma.mr import RegionTable, RemoteArena, buffer_address
from hicache_mooncake.transport.rdma.wc_status import Outcome, WcStatus, classify
from hicache_mooncake.transport.rdma.wr import Sge, build_work_requests, windows
from hicache_mooncake.transport.registry import engine_names, make_engine

LIM = wire.Limits(max_key_len=64, max_batch=8)

# The per-tuple codecs of two replies, kept as reference models of the record forms the product
# uses (``encode_lookup_records``, ``encode_alloc_records``, ``decode_alloc_records``): one struct
# per entry, big-endian.
_LOOKUP_ENTRY = struct.Struct("!BQQQBQ")  # found, body offset, size, version, type, header offset
_ALLOC_ENTRY = struct.Struct("!BQQ")  # status, body offset, version


def encode_lookup_reply(refs: Sequence[wire.SlotRef]) -> bytes:
    return struct.pack("!I", len(refs)) + b"".join(
        _LOOKUP_ENTRY.pack(int(x.found), x.offset, x.size, x.version, x.obj_type, x.header) for x in refs
    )


def encode_alloc_reply(entries: Sequence[tuple[int, int, int]]) -> bytes:
    return struct.pack("!I", len(entries)) + b"".join(_ALLOC_ENTRY.pack(*e) for e in entries)


def decode_alloc_reply(meta: bytes, expected: int) -> list[tuple[int, int, int]]:
    (n,) = struct.unpack_from("!I", meta)
    if n != expected or len(meta) != 4 + n * _ALLOC_ENTRY.size:
        raise ProtocolError(f"reply has {n} entries in {len(meta)} bytes, expected {expected}")
    return [_ALLOC_ENTRY.unpack_from(meta, 4 + i * _ALLOC_ENTRY.size) for i in range(n)]


def test_header_roundtrip_and_limits() -> None:
    h = wire.FrameHeader(wire.Op.GET, 0, 42, 10, 20)
    assert wire.unpack_header(wire.pack_header(h), LIM) == h
    with pytest.raises(ProtocolError):
        wire.unpack_header(b"\0" * wire.HEADER_SIZE, LIM)
    bad_version = wire.HEADER.pack(wire.MAGIC, 9, 1, 0, 0, 1, 0, 0)
    with pytest.raises(ProtocolError, match="version"):
        wire.unpack_header(bad_version, LIM)
    huge = wire.HEADER.pack(wire.MAGIC, wire.VERSION, 1, 0, 0, 1, LIM.max_meta + 1, 0)
    with pytest.raises(ProtocolError, match="exceeds"):
        wire.unpack_header(huge, LIM)


def test_meta_encodings_roundtrip_and_reject_bad_input() -> None:
    keys = ["a", "ключ", "c" * 64]
    assert wire.decode_keys(wire.encode_keys(keys, LIM), LIM) == keys
    with pytest.raises(ProtocolError):
        wire.encode_keys(["x" * 65], LIM)
    with pytest.raises(ProtocolError):
        wire.encode_keys(["k"] * 9, LIM)
    with pytest.raises(ProtocolError):
        wire.decode_keys(wire.encode_keys(keys, LIM)[:-1], LIM)
    with pytest.raises(ProtocolError):
        wire.decode_keys(wire.encode_keys(keys, LIM) + b"!", LIM)
    items = [("a", 10, 0), ("b", 5, 2)]
    assert wire.decode_put(wire.encode_put(items, LIM), 15, LIM) == items
    hint = wire.SetHint(7, "prev")
    assert wire.decode_put_request(wire.encode_put(items, LIM, hint), None, LIM) == (items, hint)
    assert wire.decode_put_request(wire.encode_put(items, LIM), 15, LIM)[1] == wire.SetHint()
    # a prev key that cannot go on the wire is left out of the hint, never an error
    assert wire.decode_put_request(wire.encode_put(items, LIM, wire.SetHint(0, "x" * 99)), None, LIM)[1] == (
        wire.SetHint(0, None)
    )
    with pytest.raises(ProtocolError):
        wire.decode_put(wire.encode_put(items, LIM), 16, LIM)
    assert wire.decode_get(wire.encode_get([("a", 3)], LIM), LIM) == [("a", 3)]
    assert wire.decode_get_reply(wire.encode_get_reply([(True, 3, 1), (False, 0, 0)]), 2) == [
        (True, 3, 1),
        (False, 0, 0),
    ]
    refs = [wire.SlotRef(True, 4096, 10, 7, 1, 8192), wire.SlotRef(False)]
    assert wire.decode_lookup_reply(encode_lookup_reply(refs), 2) == refs
    # the same replies as records (the node's LOOKUP and the client's one-sided paths)
    records = wire.decode_lookup_records(encode_lookup_reply(refs), 2)
    fields = ("found", "offset", "size", "version", "obj_type", "header")
    assert [tuple(int(r[f]) for f in fields) for r in records] == [
        (int(x.found), x.offset, x.size, x.version, x.obj_type, x.header) for x in refs
    ]
    made = wire.lookup_records(2)
    made[0] = records[0]
    assert wire.encode_lookup_records(made) == encode_lookup_reply(refs)
    entries = [(wire.RESERVED_NEW, 4096, 2**63 + 5), (wire.RESERVED_PRESENT, 0, 0)]
    alloc = wire.decode_alloc_records(encode_alloc_reply(entries), 2)
    assert [(int(r["status"]), int(r["offset"]), int(r["version"])) for r in alloc] == entries
    assert decode_alloc_reply(encode_alloc_reply(entries), 2) == entries
    made_alloc = wire.alloc_records(2)
    made_alloc[0] = (wire.RESERVED_NEW, 4096, 2**63 + 5)
    made_alloc[1]["status"] = wire.RESERVED_PRESENT
    assert wire.encode_alloc_records(made_alloc) == encode_alloc_reply(entries)
    assert wire.alloc_records(1)["status"].tolist() == [wire.RESERVED_NO_SPACE]
    for bad in (
        lambda: wire.decode_lookup_records(encode_lookup_reply(refs), 3),
        lambda: wire.decode_lookup_records(encode_lookup_reply(refs)[:-1], 2),
        lambda: wire.decode_alloc_records(encode_alloc_reply(entries) + b"x", 2),
        lambda: wire.decode_alloc_records(b"\0\0\0\3" + encode_alloc_reply(entries)[4:], 2),
    ):
        with pytest.raises(ProtocolError):
            bad()
    assert wire.decode_commit(wire.encode_commit([("a", 5)], LIM), LIM) == [("a", 5)]
    assert wire.decode_extents(wire.encode_extents([(0, 4)], LIM), LIM) == [(0, 4)]
    assert wire.decode_flags(wire.encode_flags([True, False]), 2) == [1, 0]


def test_rendezvous_is_stable_and_moves_only_departed_keys() -> None:
    nodes = [NodeInfo(f"n{i}", "127.0.0.1", 7000 + i) for i in range(3)]
    keys = [f"k{i}" for i in range(3000)]
    before = {k: home_of(k, nodes).node_id for k in keys}
    groups = route(keys, nodes)
    assert sorted(i for idx in groups.values() for i in idx) == list(range(3000))
    assert all(800 < len(v) < 1200 for v in groups.values())
    assert all(before[keys[i]] == nid for nid, idx in groups.items() for i in idx)
    after = {k: home_of(k, nodes[:2]).node_id for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "n2")


def test_embedded_membership_ttl() -> None:
    md = EmbeddedMetadata()
    md.register_node(NodeInfo("a", "h", 1), ttl_s=0.1)
    md.register_node(NodeInfo("b", "h", 2), ttl_s=5)
    assert [n.node_id for n in md.live_nodes()] == ["a", "b"]
    time.sleep(0.15)
    assert [n.node_id for n in md.live_nodes()] == ["b"]


def test_rdma_handshake_encoding() -> None:
    info = QpInfo(
        qpn=0x123456,
        psn=77,
        lid=3,
        gid=bytes(range(16)),
        mtu=5,
        addr=1 << 40,
        length=1 << 30,
        rkey=0xABCD,
        rd_atomic=4,
    )
    raw = info.encode()
    assert len(raw) == QPINFO_SIZE and QpInfo.decode(raw) == info and QpInfo.decode(raw).rd_atomic == 4
    with pytest.raises(ProtocolError):
        QpInfo.decode(raw[:-1])
    with pytest.raises(ProtocolError):
        QpInfo.decode(b"\x09" + raw[1:])
    with pytest.raises(ProtocolError):
        QpInfo(1 << 24, 0, 0, bytes(16), 5, 0, 0, 0).encode()


def test_rdma_region_table_and_work_request_batching() -> None:
    buf = bytearray(1 << 20)
    base = buffer_address(memoryview(buf))
    assert base == ctypes.addressof(ctypes.c_char.from_buffer(buf))
    with pytest.raises(TransportError):
        buffer_address(memoryview(b"readonly"))
    regions = RegionTable()
    regions.add(base, len(buf), lkey=11, rkey=12)
    with pytest.raises(TransportError):
        regions.add(base + 10, 10, 1, 1)
    assert regions.find(base + 100, 100) is not None and regions.find(base + len(buf) - 1, 2) is None
    arena = RemoteArena(addr=1 << 32, length=1 << 20, rkey=99)
    ids = itertools.count(100)
    extents = [
        (0, 0, [Sge(base, 4096, 11), Sge(base + 8192, 4096, 11)]),  # two parts -> one WR, two SGEs
        (1, 8192, [Sge(base + 65536, 40 * 1024, 11)]),  # above max_msg: 10 KiB pieces, one WR each
        (2, (1 << 20) - 10, [Sge(base, 4096, 11)]),  # outside the remote arena
        (3, 65536, [Sge(base + k * 2048, 1024, 11) for k in range(7)]),  # 7 SGEs, max_sge 3 -> 3 WRs
    ]
    wrs, bad = build_work_requests(extents, arena, max_sge=3, max_msg=10 * 1024, next_id=lambda: next(ids))
    assert bad == [2]
    assert [w.item for w in wrs] == [0, 1, 1, 1, 1, 3, 3, 3]
    assert [w.wr_id for w in wrs] == list(range(100, 108))  # unique, never restarting per call
    assert wrs[0].remote_addr == 1 << 32 and wrs[0].rkey == 99 and len(wrs[0].sges) == 2
    assert [w.remote_addr - (1 << 32) for w in wrs[1:5]] == [8192 + k * 10 * 1024 for k in range(4)]
    assert [len(w.sges) for w in wrs[5:]] == [3, 3, 1]
    assert [w.remote_addr - (1 << 32) for w in wrs[5:]] == [65536, 65536 + 3072, 65536 + 6144]
    assert all(w.length <= 10 * 1024 and len(w.sges) <= 3 for w in wrs)
    wins = windows(wrs, size=3)
    assert [len(b) for b in wins] == [3, 3, 2]
    assert [w.signaled for b in wins for w in b] == [False, False, True] * 2 + [False, True]


def test_rdma_completion_status_mapping() -> None:
    assert classify(WcStatus.SUCCESS) is Outcome.OK
    assert classify(WcStatus.REM_ACCESS_ERR) is Outcome.REJECTED
    assert classify(WcStatus.RETRY_EXC_ERR) is Outcome.UNREACHABLE
    assert classify(WcStatus.WR_FLUSH_ERR) is Outcome.LOCAL
    assert classify(WcStatus.LOC_PROT_ERR) is Outcome.LOCAL
    assert classify(999) is Outcome.UNREACHABLE


def test_engine_registry() -> None:
    assert {"tcp", "local", "rdma"} <= set(engine_names())
    assert make_engine("tcp").name == "tcp" and make_engine("local").one_sided
    with pytest.raises(KeyError, match="known"):
        make_engine("carrier-pigeon")


def test_arena_header_roundtrip_and_garbage() -> None:
    from hicache_mooncake.transport.arena_header import ARENA_HEADER_SIZE, ArenaHeader

    h = ArenaHeader("node-ä", 123, 1 << 20, 42, ArenaHeader.new_token())
    raw = h.pack()
    assert len(raw) < ARENA_HEADER_SIZE and ArenaHeader.unpack(raw + b"\0" * 100) == h
    assert ArenaHeader.unpack(b"\0" * ARENA_HEADER_SIZE) is None
    assert ArenaHeader.unpack(raw[:20]) is None
    assert ArenaHeader.unpack(b"X" + raw[1:]) is None


def test_loopback_detection_and_peer_grouping() -> None:
    from hicache_mooncake.transport.auth import is_loopback_host
    from hicache_mooncake.transport.node.handshake_gate import peer_key

    assert is_loopback_host("127.0.0.1") and is_loopback_host("127.3.2.1") and is_loopback_host("::1")
    assert is_loopback_host("localhost") and is_loopback_host("::ffff:127.0.0.1")
    for host in ("0.0.0.0", "::", "", "10.0.0.1", "203.0.113.7", "no-such-host.invalid"):
        assert not is_loopback_host(host), host
    assert peer_key("2001:db8:1:2:aaaa::1") == peer_key("2001:db8:1:2:bbbb::9") != peer_key("2001:db8:1:3::1")
    assert peer_key("::ffff:10.1.2.3") == "10.1.2.3" and peer_key("10.1.2.3") != peer_key("10.1.2.4")


def test_wire_key_problems() -> None:
    assert wire.key_problem("ok", LIM) is None
    assert wire.key_problem("", LIM) is not None
    assert wire.key_problem("x" * 65, LIM) is not None
    assert "UTF-8" in (wire.key_problem("k\udc80", LIM) or "")
    with pytest.raises(ProtocolError):
        wire.encode_keys(["k\udc80"], LIM)
