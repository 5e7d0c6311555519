"""The binary wire format shared by the node server and its clients (pure functions, no I/O).

A frame is a fixed 28-byte header, then ``meta_len`` bytes of metadata (keys, sizes, statuses),
then ``payload_len`` bytes of bulk payload (object bodies back to back). The header::

    magic u16 | version u8 | op u8 | status u16 | flags u16 | req_id u64 | meta_len u32 | payload_len u64

All integers are big-endian (network order). Keys are UTF-8, at most ``Limits.max_key_len``
bytes, encoded as ``u16 length + bytes``. Payload is never encoded here: the sender passes the
caller's memoryviews to ``sendmsg`` and the receiver ``recv_into``s straight into its destination.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hicache_mooncake.native import decode_keyed, encode_keyed

from .errors import ProtocolError

MAGIC = 0x484D  # "HM"
# 2: LOOKUP carries expected sizes and answers body + header offsets; PUT/ALLOC may end with a SetHint.
# 3: a GET (READ_AT) reply's payload is every requested size (extent), zeros in place of an object
#    not served, so a client knows the reply's length before it arrives and receives it in one
#    call; a refused request closes its connection.
VERSION = 3
HEADER = struct.Struct("!HBBHHQIQ")
HEADER_SIZE = HEADER.size  # 28
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_PUT_ITEM = struct.Struct("!QB")  # size, object type
_GET_ITEM = struct.Struct("!Q")  # expected size
_GET_RESP = struct.Struct("!BQB")  # found, size, type
_LOOKUP_RESP = struct.Struct("!BQQQBQ")  # found, body offset, size, version, type, header offset
_ALLOC_RESP = struct.Struct("!BQQ")  # status, offset, version
_COMMIT_ITEM = struct.Struct("!Q")  # version
# the same items as numpy trailers of a keyed list (native ``encode_keyed`` / ``decode_keyed``)
_U64_BE = np.dtype(">u8")
_PUT_TRAILER = np.dtype([("size", ">u8"), ("otype", "u1")])
assert _PUT_TRAILER.itemsize == _PUT_ITEM.size and _U64_BE.itemsize == _GET_ITEM.size == _COMMIT_ITEM.size


class Op(enum.IntEnum):
    CHALLENGE = 1  # server -> client: nonce
    AUTH = 2  # client -> server: hmac + client nonce; reply: server proof + segment info
    PING = 3
    EXISTS = 4
    PUT = 5
    GET = 6
    REMOVE = 7
    CLEAR = 8
    STATS = 9
    LOOKUP = 10  # one-sided readers: where does each key live (body/header offsets, size, version)
    ALLOC = 11  # one-sided writers: reserve slots
    COMMIT = 12  # one-sided writers: publish reserved slots
    READ_AT = 13  # address-based read (the tcp engine's one-sided emulation)
    WRITE_AT = 14  # address-based write into reserved slots
    RDMA_CONNECT = 15  # exchange QpInfo (rdma_handshake) to set up an RC QP pair


class Status(enum.IntEnum):
    OK = 0
    BAD_REQUEST = 1
    TOO_LARGE = 2
    AUTH_FAILED = 3
    UNKNOWN_OP = 4
    DRAINING = 5
    INTERNAL = 6


@dataclass(frozen=True, slots=True)
class Limits:
    """Hard limits a node enforces on every frame (and a client on every reply)."""

    max_key_len: int = 1024
    max_batch: int = 1024
    max_meta: int = 4 << 20
    max_payload: int = 1 << 30


@dataclass(frozen=True, slots=True)
class FrameHeader:
    op: int
    status: int
    req_id: int
    meta_len: int
    payload_len: int
    flags: int = 0


def pack_header(h: FrameHeader) -> bytes:
    return HEADER.pack(MAGIC, VERSION, h.op, h.status, h.flags, h.req_id, h.meta_len, h.payload_len)


def unpack_header(buf: bytes | bytearray | memoryview, limits: Limits) -> FrameHeader:
    """Parse and check a header; raise ``ProtocolError`` on bad magic, version or sizes."""
    magic, version, op, status, flags, req_id, meta_len, payload_len = HEADER.unpack(buf)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic:#x}")
    if version != VERSION:
        raise ProtocolError(f"unsupported wire version {version}")
    if meta_len > limits.max_meta:
        raise ProtocolError(f"meta of {meta_len} bytes exceeds limit {limits.max_meta}")
    if payload_len > limits.max_payload:
        raise ProtocolError(f"payload of {payload_len} bytes exceeds limit {limits.max_payload}")
    return FrameHeader(op, status, req_id, meta_len, payload_len, flags)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.buf):
            raise ProtocolError("truncated meta")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def unpack(self, st: struct.Struct) -> tuple[int, ...]:
        return st.unpack(self.take(st.size))

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ProtocolError("trailing bytes in meta")


def key_problem(key: str, limits: Limits) -> str | None:
    """Why ``key`` cannot go on the wire under ``limits`` (``None``: it can)."""
    try:
        n = len(key.encode())
    except UnicodeEncodeError:
        return "is not encodable as UTF-8 (lone surrogate?)"
    if not 0 < n <= limits.max_key_len:
        return f"has {n} bytes, outside 1..{limits.max_key_len}"
    return None


def _encode_key(key: str, limits: Limits) -> bytes:
    try:
        raw = key.encode()
    except UnicodeEncodeError as exc:
        raise ProtocolError("key is not encodable as UTF-8") from exc
    if not raw or len(raw) > limits.max_key_len:
        raise ProtocolError(f"key length {len(raw)} outside 1..{limits.max_key_len}")
    return _U16.pack(len(raw)) + raw


def _encode_keyed(keys: Sequence[str], trailers: Any, trailer_size: int, limits: Limits) -> bytes:
    """A keyed list (native ``encode_keyed``): count, then each key and its trailer."""
    if len(keys) > limits.max_batch:
        raise ProtocolError(f"batch of {len(keys)} exceeds limit {limits.max_batch}")
    try:
        return encode_keyed(keys, trailers, trailer_size, min(limits.max_key_len, 0xFFFF))
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None


def _read_keyed(r: _Reader, trailer_size: int, limits: Limits) -> tuple[list[str], bytes]:
    """The keyed list at the reader's position (native ``decode_keyed``), and its trailers."""
    try:
        keys, trailers, end = decode_keyed(
            r.buf, r.pos, trailer_size, min(limits.max_key_len, 0xFFFF), limits.max_batch
        )
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None
    r.pos = end
    return keys, trailers


def _read_count(r: _Reader, limits: Limits) -> int:
    (n,) = r.unpack(_U32)
    if n > limits.max_batch:
        raise ProtocolError(f"batch of {n} exceeds limit {limits.max_batch}")
    return n


# ---- keys only (EXISTS, REMOVE requests) ----------------------------------------------------


def encode_keys(keys: Sequence[str], limits: Limits) -> bytes:
    return _encode_keyed(keys, b"", 0, limits)


def decode_keys(meta: bytes | bytearray | memoryview, limits: Limits) -> list[str]:
    r = _Reader(meta)
    keys, _ = _read_keyed(r, 0, limits)
    r.done()
    return keys


def encode_flags(flags: Sequence[bool | int]) -> bytes:
    return _U32.pack(len(flags)) + bytes(int(f) & 0xFF for f in flags)


def decode_flags(meta: bytes | bytearray | memoryview, expected: int) -> list[int]:
    r = _Reader(meta)
    (n,) = r.unpack(_U32)
    if n != expected:
        raise ProtocolError(f"reply has {n} entries, expected {expected}")
    out = list(r.take(n))
    r.done()
    return out


# ---- PUT ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetHint:
    """What a writer knows about a batch of new objects (SGLang's prefix keys): how many pages of
    the request were stored before it and the key of the last of them. The store's policy uses it;
    it never changes which bytes are stored."""

    prefix_len: int | None = None
    prev_key: str | None = None


_NO_PREFIX = 0xFFFFFFFF


def _encode_hint(hint: SetHint | None, limits: Limits) -> bytes:
    hint = hint or SetHint()
    prefix = _NO_PREFIX if hint.prefix_len is None else min(max(hint.prefix_len, 0), _NO_PREFIX - 1)
    prev = _U16.pack(0)
    if hint.prev_key is not None and wire_key_ok(hint.prev_key, limits):
        prev = _encode_key(hint.prev_key, limits)
    return _U32.pack(prefix) + prev


def _read_hint(r: _Reader, limits: Limits) -> SetHint:
    (prefix,) = r.unpack(_U32)
    (n,) = r.unpack(_U16)
    prev = None
    if n:
        if n > limits.max_key_len:
            raise ProtocolError(f"key length {n} outside 1..{limits.max_key_len}")
        try:
            prev = bytes(r.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError("key is not UTF-8") from exc
    return SetHint(None if prefix == _NO_PREFIX else prefix, prev)


def wire_key_ok(key: str, limits: Limits) -> bool:
    return key_problem(key, limits) is None


def encode_put(items: Sequence[tuple[str, int, int]], limits: Limits, hint: SetHint | None = None) -> bytes:
    """``items``: (key, size, object type); the payload follows in the same order. A batch's
    ``SetHint`` closes the meta when given (an unencodable ``prev_key`` is left out, never an error)."""
    trailers = np.empty(len(items), _PUT_TRAILER)
    keys = [key for key, _, _ in items]
    if items:
        trailers["size"] = [size for _, size, _ in items]
        trailers["otype"] = [otype for _, _, otype in items]
    meta = _encode_keyed(keys, trailers, _PUT_TRAILER.itemsize, limits)
    return meta if hint is None else meta + _encode_hint(hint, limits)


def decode_put_request(
    meta: bytes | bytearray | memoryview, payload_len: int | None, limits: Limits
) -> tuple[list[tuple[str, int, int]], SetHint]:
    """PUT (``payload_len`` checked against the sizes) and ALLOC (``payload_len=None``) items,
    and the batch's hint."""
    r = _Reader(meta)
    keys, trailers = _read_keyed(r, _PUT_TRAILER.itemsize, limits)
    items = np.frombuffer(trailers, _PUT_TRAILER)
    out = list(zip(keys, items["size"].tolist(), items["otype"].tolist(), strict=True))
    hint = _read_hint(r, limits) if r.pos < len(r.buf) else SetHint()  # the hint is optional
    r.done()
    if payload_len is not None and sum(s for _, s, _ in out) != payload_len:
        raise ProtocolError("payload length does not match the item sizes")
    return out, hint


def decode_put(
    meta: bytes | bytearray | memoryview, payload_len: int | None, limits: Limits
) -> list[tuple[str, int, int]]:
    """The items of ``decode_put_request``."""
    return decode_put_request(meta, payload_len, limits)[0]


# ---- GET ------------------------------------------------------------------------------------


def encode_get(items: Sequence[tuple[str, int]], limits: Limits) -> bytes:
    """``items``: (key, expected size); a stored object of another size is a miss."""
    return _encode_keyed_u64([key for key, _ in items], [size for _, size in items], limits)


def decode_get(meta: bytes | bytearray | memoryview, limits: Limits) -> list[tuple[str, int]]:
    """GET and LOOKUP requests: ``(key, expected size)`` per object (LOOKUP: 0 = any size)."""
    return _decode_keyed_u64(meta, limits, _GET_ITEM)


def _decode_keyed_u64(
    meta: bytes | bytearray | memoryview, limits: Limits, item: struct.Struct
) -> list[tuple[str, int]]:
    """A counted list of ``(key, one unsigned 64-bit field)``; limits enforced, no trailing bytes."""
    assert item.size == _U64_BE.itemsize
    r = _Reader(meta)
    keys, trailers = _read_keyed(r, _U64_BE.itemsize, limits)
    r.done()
    return list(zip(keys, np.frombuffer(trailers, _U64_BE).tolist(), strict=True))


def _encode_keyed_u64(keys: Sequence[str], values: Sequence[int], limits: Limits) -> bytes:
    """The counted list of ``(key, value)`` that ``_decode_keyed_u64`` reads (values in [0, 2**64))."""
    try:
        trailers = np.array(values, _U64_BE) if values else b""
    except OverflowError as exc:
        raise ProtocolError(f"a value is outside [0, 2**64): {exc}") from None
    return _encode_keyed(keys, trailers, _U64_BE.itemsize, limits)


def encode_get_reply(entries: Sequence[tuple[bool, int, int]]) -> bytes:
    """(found, size, type) per requested key. The payload that follows holds, in order, each
    requested size: the found body, or zeros where the object was not served (a miss costs its
    bytes on the wire; a reply's length is known from its request: :func:`get_reply_sizes`)."""
    return _U32.pack(len(entries)) + b"".join(_GET_RESP.pack(int(f), s, t) for f, s, t in entries)


_REPLY_ENTRY_SIZES = {
    Op.EXISTS: 1,  # encode_flags
    Op.REMOVE: 1,
    Op.PUT: 1,
    Op.COMMIT: 1,
    Op.READ_AT: 1,
    Op.WRITE_AT: 1,
    Op.GET: _GET_RESP.size,
    Op.LOOKUP: _LOOKUP_RESP.size,
    Op.ALLOC: _ALLOC_RESP.size,
}


def get_reply_sizes(items: Sequence[tuple[str, int]]) -> tuple[int, int]:
    """(meta bytes, payload bytes) of the reply to a GET of ``items`` (key, expected size)."""
    return reply_meta_size(Op.GET, len(items)), sum(size for _, size in items)


def reply_meta_size(op: Op, n: int) -> int:
    """Meta bytes of the successful reply to a request of ``n`` items of ``op``, for the ops whose
    reply is fixed by their request (a counted list of fixed-size entries); KeyError for others."""
    return _U32.size + n * _REPLY_ENTRY_SIZES[op]


def decode_get_reply(meta: bytes | bytearray | memoryview, expected: int) -> list[tuple[bool, int, int]]:
    r = _Reader(meta)
    (n,) = r.unpack(_U32)
    if n != expected:
        raise ProtocolError(f"reply has {n} entries, expected {expected}")
    out = []
    for _ in range(n):
        f, s, t = r.unpack(_GET_RESP)
        out.append((bool(f), s, t))
    r.done()
    return out


# ---- LOOKUP / ALLOC / COMMIT (one-sided data paths) ------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotRef:
    """Where an object lives in a node's arena, for one-sided access: ``offset`` of its body and
    ``header`` of its ``ObjectHeader`` (the store chooses the layout; bodies stay page-aligned)."""

    found: bool
    offset: int = 0
    size: int = 0
    version: int = 0
    obj_type: int = 0
    header: int = 0


_LOOKUP_RECORD = np.dtype(
    [
        ("found", "u1"),
        ("offset", ">u8"),
        ("size", ">u8"),
        ("version", ">u8"),
        ("obj_type", "u1"),
        ("header", ">u8"),
    ]
)
assert _LOOKUP_RECORD.itemsize == _LOOKUP_RESP.size


def lookup_records(n: int) -> np.ndarray:
    """``n`` LOOKUP reply records, all misses (zeros): fields ``found``, ``offset``, ``size``,
    ``version``, ``obj_type``, ``header`` (a ``SlotRef``'s), read as ``records["size"]``; a store
    fills the hits' fields and ``encode_lookup_records`` sends them as they are."""
    return np.zeros(n, _LOOKUP_RECORD)


def encode_lookup_records(records: np.ndarray) -> bytes:
    """The LOOKUP reply of ``records`` (``lookup_records``' layout), in one copy: a counted list
    of ``_LOOKUP_RESP`` entries, the layout ``decode_lookup_reply`` reads."""
    return _U32.pack(len(records)) + np.asarray(records, _LOOKUP_RECORD).tobytes()


def decode_lookup_records(meta: bytes | bytearray | memoryview, expected: int) -> np.ndarray:
    """The LOOKUP reply as one numpy record per key (fields ``found``, ``offset``, ``size``,
    ``version``, ``obj_type``, ``header``: what ``decode_lookup_reply`` puts in each
    ``SlotRef``), with no object per key."""
    return _reply_records(meta, expected, Op.LOOKUP, _LOOKUP_RECORD)


def _reply_records(
    meta: bytes | bytearray | memoryview, expected: int, op: Op, record: np.dtype
) -> np.ndarray:
    """A counted reply of ``expected`` fixed-size entries of ``op`` viewed as ``record``s (no
    copy); ProtocolError when its length or its count is not that."""
    if len(meta) != reply_meta_size(op, expected):
        raise ProtocolError(f"{op.name} reply of {len(meta)} bytes, expected {expected} entries")
    (n,) = _U32.unpack_from(meta)
    if n != expected:
        raise ProtocolError(f"reply has {n} entries, expected {expected}")
    return np.frombuffer(meta, record, offset=_U32.size)


def decode_lookup_reply(meta: bytes | bytearray | memoryview, expected: int) -> list[SlotRef]:
    r = _Reader(meta)
    (n,) = r.unpack(_U32)
    if n != expected:
        raise ProtocolError(f"reply has {n} entries, expected {expected}")
    out = []
    for _ in range(n):
        f, off, size, ver, t, hdr = r.unpack(_LOOKUP_RESP)
        out.append(SlotRef(bool(f), off, size, ver, t, hdr))
    r.done()
    return out


# ALLOC reply statuses, one per item (the store's ``reserve`` answers them: node/served_store.py).
RESERVED_NEW = 0
"""A slot was reserved: send (or write) the body, then commit."""
RESERVED_PRESENT = 1
"""The store holds the key already (values are immutable): nothing to send; a success."""
RESERVED_NO_SPACE = 2
"""No room before the deadline (or the object is larger than any slot)."""
RESERVED_BUSY = 3
"""Another writer holds a reservation for the key right now."""


_ALLOC_RECORD = np.dtype([("status", "u1"), ("offset", ">u8"), ("version", ">u8")])
assert _ALLOC_RECORD.itemsize == _ALLOC_RESP.size


def alloc_records(n: int) -> np.ndarray:
    """``n`` ALLOC reply records (fields ``status``, ``offset``, ``version``), all
    ``RESERVED_NO_SPACE``: a store sets the others' fields and ``encode_alloc_records`` sends
    them as they are."""
    out = np.zeros(n, _ALLOC_RECORD)
    out["status"] = RESERVED_NO_SPACE
    return out


def encode_alloc_records(records: np.ndarray) -> bytes:
    """The ALLOC reply of ``records`` (``alloc_records``' layout), in one copy: a counted list of
    ``_ALLOC_RESP`` entries (status: one of ``RESERVED_*``, body offset, version)."""
    return _U32.pack(len(records)) + np.asarray(records, _ALLOC_RECORD).tobytes()


def decode_alloc_records(meta: bytes | bytearray | memoryview, expected: int) -> np.ndarray:
    """The ALLOC reply (``encode_alloc_records``) as one numpy record per item (``status``,
    ``offset``, ``version``), with no object per item."""
    return _reply_records(meta, expected, Op.ALLOC, _ALLOC_RECORD)


def encode_commit(items: Sequence[tuple[str, int]], limits: Limits) -> bytes:
    """(key, version) per reserved slot; the top bit set in version means abort."""
    return _encode_keyed_u64([key for key, _ in items], [version for _, version in items], limits)


def decode_commit(meta: bytes | bytearray | memoryview, limits: Limits) -> list[tuple[str, int]]:
    """COMMIT request: ``(key, version)`` per object."""
    return _decode_keyed_u64(meta, limits, _COMMIT_ITEM)


# ---- READ_AT / WRITE_AT (address-based, what a one-sided engine does, emulated over TCP) ----

_EXTENT = struct.Struct("!QQ")


def encode_extents(extents: Sequence[tuple[int, int]], limits: Limits) -> bytes:
    if len(extents) > limits.max_batch:
        raise ProtocolError(f"batch of {len(extents)} exceeds limit {limits.max_batch}")
    return _U32.pack(len(extents)) + b"".join(_EXTENT.pack(o, n) for o, n in extents)


def decode_extents(meta: bytes | bytearray | memoryview, limits: Limits) -> list[tuple[int, int]]:
    r = _Reader(meta)
    out = [r.unpack(_EXTENT) for _ in range(_read_count(r, limits))]
    r.done()
    return [(int(o), int(n)) for o, n in out]
