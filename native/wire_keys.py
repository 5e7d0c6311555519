"""The wire protocol's counted key lists, made and parsed in one native call each.

A keyed list is ``count u32 | per item: key length u16 | key UTF-8 | trailer`` (big-endian; the
trailer is a fixed number of bytes per item that the caller lays out, e.g. a numpy array of a
big-endian structured dtype). ``transport.wire`` builds every keyed request on these. Both hold the
GIL (they read and make str objects); an ``exists`` of 128 keys through the host cache took 350 us
with the Python loop of ``struct`` calls on both sides, 200 us with these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _core


def encode_keyed(keys: Sequence[str], trailers: Any, trailer_size: int, max_key_len: int) -> bytes:
    """The list of ``keys``, item i followed by ``trailers[i * trailer_size:][:trailer_size]``.
    ValueError naming the item for a key that is empty, longer than ``max_key_len`` bytes in
    UTF-8 or not encodable (a lone surrogate), or for trailers of the wrong length; TypeError for
    a key that is not a str."""
    return _core.wire_encode_keyed(keys, trailers, trailer_size, max_key_len)


def decode_keyed(
    meta: Any, offset: int, trailer_size: int, max_key_len: int, max_batch: int
) -> tuple[list[str], bytes, int]:
    """The list that starts at ``meta[offset]``: ``(keys, trailers back to back, end offset)``.
    ValueError saying what is wrong (truncated, a count over ``max_batch``, a key length outside
    ``1..max_key_len``, a key that is not UTF-8); nothing outside ``meta`` is read."""
    return _core.wire_decode_keyed(meta, offset, trailer_size, max_key_len, max_batch)
