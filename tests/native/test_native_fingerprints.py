"""Fingerprints and checksums: the values of python-xxhash (the format on disk), never 0, batch ==
single, and the test-only mask that forces collisions."""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash
from gil_probe import progress_during
from reference_models import ref_fingerprint

from hicache_mooncake import native


def random_keys(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"model-{rng.randrange(10**6)}-tp{rng.randrange(8)}-" + "x" * rng.randrange(0, 300) for _ in range(n)
    ]


def test_fingerprints_are_xxh3_of_the_utf8_bytes_in_batch_and_one_by_one() -> None:
    keys: list[str | bytes] = [*random_keys(200, 1), "", "ключ-ü", b"\x00\xffraw"]
    batch = native.fingerprints(keys)
    assert batch.dtype == np.uint64 and batch.shape == (len(keys),)
    assert batch.tolist() == [ref_fingerprint(k) for k in keys]
    assert [native.fingerprint(k) for k in keys] == batch.tolist()


def test_the_test_mask_forces_collisions_and_zero_becomes_one() -> None:
    keys = random_keys(64, 2)
    native.set_test_fingerprint_mask(0x3)
    fps = native.fingerprints(keys).tolist()
    assert set(fps) <= {1, 2, 3} and len(set(fps)) < len(keys)
    assert fps == [ref_fingerprint(k, 0x3) for k in keys]
    # Two different keys now share a fingerprint: a table keyed by it holds one entry for both,
    # which is why the full key is stored with every entry and checked on read.
    a, b = next(
        (x, y) for x in keys for y in keys if x != y and native.fingerprint(x) == native.fingerprint(y)
    )
    table = native.FpTable()
    table.put([native.fingerprint(a)], [1])
    assert table.put([native.fingerprint(b)], [2]).tolist() == [True]
    native.set_test_fingerprint_mask(0)
    assert native.fingerprint(a) != native.fingerprint(b)


def test_bad_keys_are_refused_naming_the_index() -> None:
    with pytest.raises(TypeError, match=r"keys\[1\] must be str or bytes, got int"):
        native.fingerprints(["a", 3])
    with pytest.raises(TypeError, match="key must be str or bytes"):
        native.fingerprint(None)  # type: ignore[arg-type]


def test_checksums_equal_python_xxhash() -> None:
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, size=1 << 20, dtype=np.uint8)
    assert native.xxh3_64(buf) == xxhash.xxh3_64_intdigest(buf.tobytes())
    assert native.xxh3_64(b"") == xxhash.xxh3_64_intdigest(b"")
    lengths = [0, 1, 3, 16, 17, 128, 129, 240, 241, 4096, 65536, 1 << 19]
    offsets = [int(rng.integers(0, buf.size - n + 1)) for n in lengths]
    got = native.xxh3_batch(buf, offsets, lengths)
    want = [xxhash.xxh3_64_intdigest(buf[o : o + n].tobytes()) for o, n in zip(offsets, lengths, strict=True)]
    assert got.tolist() == want
    with pytest.raises(ValueError, match=r"range 1: offset 1048575 \+ length 2 > buffer size 1048576"):
        native.xxh3_batch(buf, [0, (1 << 20) - 1], [1, 2])


def test_xxh3_comes_from_python_xxhash_dispatch() -> None:
    library, symbol = native.XXH3_SOURCE
    assert symbol == "XXH3_64bits_dispatch" and library == xxhash._xxhash.__file__


def test_the_system_libxxhash_gives_the_same_values_and_a_wrong_library_is_refused() -> None:
    data = np.random.default_rng(9).integers(0, 256, size=100_000, dtype=np.uint8)
    want = [native.xxh3_64(data[:n]) for n in (0, 5, 200, 100_000)]
    try:
        native.set_xxh3_library(native.SYSTEM_LIBRARY, native.SYSTEM_SYMBOL)
        assert [native.xxh3_64(data[:n]) for n in (0, 5, 200, 100_000)] == want
        assert native.fingerprint("k") == ref_fingerprint("k")
        with pytest.raises(OSError, match="no-such-libxxhash"):
            native.set_xxh3_library("no-such-libxxhash.so", "XXH3_64bits")
        with pytest.raises(OSError, match="has no symbol XXH3_nope"):
            native.set_xxh3_library(native.SYSTEM_LIBRARY, "XXH3_nope")
        with pytest.raises(ValueError, match="does not compute xxh3_64"):
            native.set_xxh3_library(native.SYSTEM_LIBRARY, "XXH32")  # a 32-bit hash
    finally:
        native.set_xxh3_library(*native.XXH3_SOURCE)
    assert native.xxh3_64(data) == want[-1]


def test_batch_hashing_releases_the_gil() -> None:
    keys = random_keys(100_000, 4)
    assert progress_during(lambda: native.fingerprints(keys)) > 0
    big = np.zeros(128 << 20, dtype=np.uint8)
    assert progress_during(lambda: native.xxh3_64(big)) > 0


def test_key_hashes_are_what_object_headers_carry() -> None:
    """``key_hashes``: the plain xxh3_64 of each key (``object_header.key_hash``), never masked
    like a fingerprint, in one call for a batch (the DRAM tier's headers, the node client's
    checks)."""
    from hicache_mooncake.transport.object_header import key_hash

    keys = ["", "a", "ключ-ü", *(f"model/{i:064x}@tp0of1" for i in range(300))]
    want = [key_hash(k) for k in keys]
    assert native.key_hashes(keys).tolist() == want
    assert native.key_hashes([k.encode() for k in keys]).tolist() == want
    native.set_test_fingerprint_mask(0xF)
    try:
        assert native.key_hashes(keys).tolist() == want
        assert set(native.fingerprints(keys).tolist()) <= set(range(1, 16))
    finally:
        native.set_test_fingerprint_mask(0)
    with pytest.raises(TypeError, match=r"keys\[1\] must be str or bytes"):
        native.key_hashes(["a", 3])
    assert native.key_hashes([]).size == 0
