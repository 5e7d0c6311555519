"""The wire's keyed lists (native ``encode_keyed`` / ``decode_keyed``), held to the Python codec
they replaced (``reference_models.ref_encode_keyed`` / ``ref_decode_keyed``) on seeded random
lists and on fuzzed bytes: the same keys, trailers and end, or an error of the same kind; never
a read outside the buffer (this file runs under AddressSanitizer in CI)."""

from __future__ import annotations

import random

import pytest
from reference_models import ref_decode_keyed, ref_encode_keyed

from hicache_mooncake.native import decode_keyed, encode_keyed

_ALPHABET = "abcXYZ0189-_:/é€😀"


def _key(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, longest)))


def _outcome(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return ("ok", fn(*args))
    except ValueError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("seed", range(6))
def test_lists_roundtrip_and_match_the_python_codec(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        tsize = rng.choice([0, 1, 8, 9, 41])
        keys = [_key(rng, 24) for _ in range(rng.randint(0, 40))]
        trailers = rng.randbytes(len(keys) * tsize)
        limit = rng.choice([16, 64, 1024])
        want = _outcome(ref_encode_keyed, keys, trailers, tsize, limit)
        got = _outcome(encode_keyed, keys, trailers, tsize, limit)
        assert got == want
        if got[0] != "ok":
            continue
        prefix = rng.randbytes(rng.randint(0, 5))
        meta = prefix + got[1] + rng.randbytes(rng.randint(0, 3))
        assert decode_keyed(meta, len(prefix), tsize, limit, 64) == ref_decode_keyed(
            meta, len(prefix), tsize, limit, 64
        )
        assert decode_keyed(meta, len(prefix), tsize, limit, 64)[:2] == (keys, trailers)


@pytest.mark.parametrize("seed", range(6))
def test_fuzzed_bytes_decode_as_the_python_codec_did(seed: int) -> None:
    """Truncations, flipped bytes, huge counts and lengths, invalid UTF-8: same answer or the same
    error message as the reference."""
    rng = random.Random(100 + seed)
    for _ in range(3000):
        tsize = rng.choice([0, 8, 9])
        keys = [_key(rng, 12) for _ in range(rng.randint(0, 12))]
        meta = bytearray(ref_encode_keyed(keys, rng.randbytes(len(keys) * tsize), tsize, 1024))
        for _ in range(rng.randint(1, 3)):
            how = rng.randrange(4)
            if how == 0 and meta:
                del meta[rng.randrange(len(meta)) :]
            elif how == 1 and meta:
                meta[rng.randrange(len(meta))] = rng.randrange(256)
            elif how == 2 and len(meta) >= 4:
                meta[0:4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x01\x00", b"\x7f\x00\x00\x00"])
            else:
                meta += rng.randbytes(rng.randint(1, 8))
        limit = rng.choice([4, 12, 1024])
        data = bytes(meta)
        got = _outcome(decode_keyed, data, 0, tsize, limit, 16)
        want = _outcome(ref_decode_keyed, data, 0, tsize, limit, 16)
        assert got == want, data


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="key 1 is not a str"):
        encode_keyed(["a", b"b"], b"", 0, 16)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="key 0 is not encodable"):
        encode_keyed(["k\udc80"], b"", 0, 16)
    with pytest.raises(ValueError, match="trailers has 3 bytes"):
        encode_keyed(["a"], b"abc", 8, 16)
    with pytest.raises(ValueError, match="max_key_len"):
        encode_keyed(["a"], b"", 0, 70000)
    with pytest.raises(ValueError, match="offset"):
        decode_keyed(b"\x00\x00\x00\x00", 5, 0, 16, 16)
    assert decode_keyed(b"\x00\x00\x00\x00", 0, 0, 16, 16) == ([], b"", 4)
