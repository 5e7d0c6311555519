"""``native.read_entries``: SSD entries read from real files in runs, each checked on the worker
that read it and copied into its parts of the caller's buffer only when sound; every verdict held
to the reference model (tests/native/reference_models.py) on seeded random corruptions; bad
arguments raise before any I/O; a deadline that passed reads nothing."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest
from reference_models import ENTRY_BLOCK, ref_entry_verdict

from hicache_mooncake import native
from hicache_mooncake.native import EntryVerdict
from hicache_mooncake.ssd.format import FLAG_DEAD, EntryHeader, entry_size

MAX_KEY = 1024
SENTINEL = 0xAB


class Entry:
    """One entry as the write path lays it out: header block, payload, zero padding."""

    def __init__(self, key: bytes, payload: bytes, seq: int, gen: int, flags: int = 0) -> None:
        self.key, self.payload, self.seq, self.gen = key, payload, seq, gen
        block = bytearray(entry_size(len(payload)))
        import xxhash

        EntryHeader(key, len(payload), seq, gen, xxhash.xxh3_64_intdigest(payload), flags).pack_into(
            memoryview(block)
        )
        block[ENTRY_BLOCK : ENTRY_BLOCK + len(payload)] = payload
        self.bytes = block


def entries(rng: np.random.Generator, n: int, prefix: str = "key") -> list[Entry]:
    out = []
    for i in range(n):
        size = int(rng.choice([1, 100, 4096, 5000, 3 * 4096, 70_000]))
        out.append(Entry(f"{prefix}-{i}".encode(), rng.bytes(size), seq=1000 + i, gen=7))
    return out


def write_file(path: Path, blobs: list[bytes], direct: bool = True) -> tuple[int, list[int]]:
    """The entries back to back from offset 4096 (after a region header block); (fd, offsets)."""
    data = bytearray(ENTRY_BLOCK)
    offsets = []
    for b in blobs:
        offsets.append(len(data))
        data += b
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    return fd, offsets


def read(
    fd_of_run: list[int],
    run_offsets: list[int],
    run_items: list[int],
    expect: list[Entry],
    dst: np.ndarray,
    split: int = 2,
    timeout_s: float = 10.0,
) -> tuple[list[int], list[list[tuple[int, int]]]]:
    """read_entries with each payload scattered into ``split`` parts at odd offsets of ``dst``;
    returns (results, each entry's parts as (offset, length))."""
    parts: list[list[tuple[int, int]]] = []
    at = 3
    for e in expect:
        n = len(e.payload)
        cuts = sorted({0, n, *(n * (j + 1) // split for j in range(split - 1))})
        mine = [(at + c0 + 7 * j, c1 - c0) for j, (c0, c1) in enumerate(zip(cuts, cuts[1:], strict=False))]
        parts.append(mine)
        at += n + 7 * split + 5
    assert at <= dst.size
    flat = [p for ps in parts for p in ps]
    got = native.read_entries(
        fds=fd_of_run,
        run_offsets=run_offsets,
        run_items=run_items,
        payload_lengths=[len(e.payload) for e in expect],
        gens=[e.gen for e in expect],
        seqs=[e.seq for e in expect],
        keys=[e.key for e in expect],
        part_items=np.cumsum([0] + [len(ps) for ps in parts]),
        dst=dst,
        dst_offsets=[o for o, _ in flat],
        part_lengths=[n for _, n in flat],
        max_key=MAX_KEY,
        timeout_s=timeout_s,
    )
    return got.tolist(), parts


def gathered(dst: np.ndarray, parts: list[tuple[int, int]]) -> bytes:
    return b"".join(dst[o : o + n].tobytes() for o, n in parts)


def test_sound_entries_land_byte_exact_in_their_parts_with_o_direct(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    es = entries(rng, 12)
    fd, offsets = write_file(tmp_path / "region", [e.bytes for e in es])
    try:
        dst = np.full(2 << 20, SENTINEL, np.uint8)
        # three runs: entries 0-4, 5-8 and 9-11, each read from its first entry's offset
        got, parts = read([fd, fd, fd], [offsets[0], offsets[5], offsets[9]], [0, 5, 9, 12], es, dst, split=3)
        assert got == [EntryVerdict.OK] * 12
        for e, ps in zip(es, parts, strict=True):
            assert gathered(dst, ps) == e.payload
        used = np.zeros(dst.size, bool)
        for o, n in (p for ps in parts for p in ps):
            used[o : o + n] = True
        assert (dst[~used] == SENTINEL).all()  # nothing written outside the parts
    finally:
        os.close(fd)


def _corrupt(rng: np.random.Generator, e: Entry) -> tuple[bytearray, dict[str, object]]:
    """One random corruption of ``e``'s bytes or of what the index expects of it."""
    data = bytearray(e.bytes)
    expect: dict[str, object] = {"key": e.key, "gen": e.gen, "seq": e.seq}
    kind = int(rng.integers(0, 9))
    if kind == 0:  # a payload byte
        data[ENTRY_BLOCK + int(rng.integers(0, len(e.payload)))] ^= 1 << int(rng.integers(0, 8))
    elif kind == 1:  # a header byte (fixed part, hash or key)
        data[int(rng.integers(0, 56 + len(e.key)))] ^= 1 << int(rng.integers(0, 8))
    elif kind == 2:
        expect["gen"] = e.gen + 1
    elif kind == 3:
        expect["seq"] = e.seq - 1
    elif kind == 4:  # another key under the same location (a fingerprint collision)
        expect["key"] = e.key + b"x"
    elif kind == 5:  # a dead entry (fsck --repair), header hash recomputed: a sound header
        data[:ENTRY_BLOCK] = bytes(ENTRY_BLOCK)
        import xxhash

        EntryHeader(
            e.key, len(e.payload), e.seq, e.gen, xxhash.xxh3_64_intdigest(e.payload), FLAG_DEAD
        ).pack_into(memoryview(data))
    elif kind == 6:  # a key length past the block
        data[8:12] = (5000).to_bytes(4, "little")
    elif kind == 7:  # never written
        data[:ENTRY_BLOCK] = bytes(ENTRY_BLOCK)
    return data, expect


@pytest.mark.parametrize("seed", range(6))
def test_every_verdict_matches_the_reference_model_on_random_corruptions(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    es = entries(rng, 24, prefix=f"s{seed}")
    blobs, expected_keys, gens, seqs = [], [], [], []
    for e in es:
        data, expect = _corrupt(rng, e) if rng.random() < 0.7 else (bytearray(e.bytes), {})
        blobs.append(bytes(data))
        expected_keys.append(expect.get("key", e.key))
        gens.append(expect.get("gen", e.gen))
        seqs.append(expect.get("seq", e.seq))
    truncate = bool(rng.integers(0, 2))  # the file ends inside the last entry
    fd, offsets = write_file(tmp_path / "region", blobs, direct=False)
    if truncate:
        os.truncate(tmp_path / "region", offsets[-1] + ENTRY_BLOCK + len(es[-1].payload) // 2)
    try:
        asked = [Entry.__new__(Entry) for _ in es]
        for a, e, k, g, s in zip(asked, es, expected_keys, gens, seqs, strict=True):
            a.key, a.payload, a.gen, a.seq = k, e.payload, g, s  # type: ignore[assignment]
        dst = np.full(4 << 20, SENTINEL, np.uint8)
        cut = int(rng.integers(1, len(es)))  # two runs
        got, parts = read([fd, fd], [offsets[0], offsets[cut]], [0, cut, len(es)], asked, dst)
        on_disk = (tmp_path / "region").read_bytes()
        for i, (a, r, ps) in enumerate(zip(asked, got, parts, strict=True)):
            end = offsets[i + 1] if i + 1 < len(offsets) else len(on_disk)
            want = ref_entry_verdict(on_disk[offsets[i] : end], a.key, len(a.payload), a.gen, a.seq, MAX_KEY)
            assert EntryVerdict(r).name == want, f"entry {i}"
            if want == "OK":
                assert gathered(dst, ps) == a.payload
            else:  # a miss leaves the caller's memory as it was
                assert all((dst[o : o + n] == SENTINEL).all() for o, n in ps)
    finally:
        os.close(fd)


def test_a_failed_read_fails_its_run_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    es = entries(rng, 4)
    fd, offsets = write_file(tmp_path / "region", [e.bytes for e in es], direct=False)
    wronly = os.open(tmp_path / "region", os.O_WRONLY)
    try:
        dst = np.full(1 << 20, SENTINEL, np.uint8)
        got, parts = read([wronly, fd], [offsets[0], offsets[2]], [0, 2, 4], es, dst)
        assert got == [-errno.EBADF, -errno.EBADF, EntryVerdict.OK, EntryVerdict.OK]
        assert gathered(dst, parts[3]) == es[3].payload
    finally:
        os.close(fd)
        os.close(wronly)


def test_a_passed_deadline_reads_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    es = entries(rng, 3)
    fd, offsets = write_file(tmp_path / "region", [e.bytes for e in es], direct=False)
    try:
        dst = np.full(1 << 20, SENTINEL, np.uint8)
        got, _ = read([fd], [offsets[0]], [0, 3], es, dst, timeout_s=0.0)
        assert got == [-errno.ETIMEDOUT] * 3 and (dst == SENTINEL).all()
        assert read([], [], [0], [], dst)[0] == []  # nothing asked: nothing done
    finally:
        os.close(fd)


def test_reads_done_after_the_deadline_never_land_in_the_callers_buffer() -> None:
    """Runs of 16 MiB from /dev/zero (all zeros: no entry magic) with a deadline of 1 ms: the call
    returns by it with the runs not done as -ETIMEDOUT, the caller's buffer untouched, and the runs
    still read after it are counted as discarded. Repeated until a run was in flight at a deadline."""
    fd = os.open("/dev/zero", os.O_RDONLY)
    late_before = native.io_late_items()[0]
    timed_out = 0
    plen = (16 << 20) - ENTRY_BLOCK
    dst = np.full(plen, SENTINEL, np.uint8)  # every entry's one part: the same range (never written)
    try:
        for _ in range(12):
            start = time.monotonic()
            res = native.read_entries(
                fds=[fd] * 8, run_offsets=[0] * 8, run_items=list(range(9)), payload_lengths=[plen] * 8,
                gens=[1] * 8, seqs=[1] * 8, keys=[b"k"] * 8, part_items=list(range(9)), dst=dst,
                dst_offsets=[0] * 8, part_lengths=[plen] * 8, max_key=MAX_KEY, timeout_s=0.001,
            ).tolist()  # fmt: skip
            assert time.monotonic() - start < 2.0
            # every run either timed out or was read whole (its zeros: no entry); a caller thread
            # descheduled past the reads (a loaded host) may find them all done: the next round
            assert set(res) <= {EntryVerdict.BAD_HEADER, -errno.ETIMEDOUT}
            timed_out += -errno.ETIMEDOUT in res
            time.sleep(0.2)  # the pool finishes the runs in flight into its own staging
            if native.io_late_items()[0] > late_before:
                break
    finally:
        os.close(fd)  # the workers read on their own dup of it
    assert timed_out, "no call ever returned at its deadline"
    assert native.io_late_items()[0] > late_before, "no read was ever in flight at a deadline"
    assert (dst == SENTINEL).all()


def test_bad_arguments_raise_before_any_io(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    es = entries(rng, 2)
    fd, offsets = write_file(tmp_path / "region", [e.bytes for e in es], direct=False)
    dst = np.full(1 << 20, SENTINEL, np.uint8)
    n0, n1 = len(es[0].payload), len(es[1].payload)
    good: dict[str, object] = {
        "fds": [fd], "run_offsets": [offsets[0]], "run_items": [0, 2],
        "payload_lengths": [n0, n1], "gens": [7, 7], "seqs": [1000, 1001], "keys": [e.key for e in es],
        "part_items": [0, 1, 2], "dst": dst, "dst_offsets": [0, n0], "part_lengths": [n0, n1],
        "max_key": MAX_KEY, "timeout_s": 5.0,
    }  # fmt: skip
    bad: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"part_lengths": [n0, n1 - 1]}, ValueError, "its parts hold"),
        ({"dst_offsets": [0, dst.size - n1 + 1]}, ValueError, "> dst size"),
        ({"dst": dst[: n0 + n1].tobytes()}, (TypeError, BufferError), "read-only"),  # type: ignore[dict-item]
        ({"run_items": [0, 1]}, ValueError, "run_items must start at 0 and end at 2"),
        ({"run_items": [0, 0]}, ValueError, "run_items"),
        ({"fds": [-1]}, ValueError, "file descriptor"),
        ({"part_items": [0, 2, 1]}, ValueError, "part_items"),
        ({"gens": [7]}, ValueError, "gens"),
        ({"run_offsets": [(1 << 63) - 4096]}, ValueError, "largest file offset"),
        ({"payload_lengths": [1 << 40, n1], "part_lengths": [1 << 40, n1]}, ValueError, "dst size"),
        ({"timeout_s": float("nan")}, ValueError, "timeout_s"),
    ]
    try:
        native.read_entries(**good)  # type: ignore[arg-type]
        assert (dst[: n0 + n1] != SENTINEL).any()
        dst[:] = SENTINEL
        for change, exc, match in bad:
            with pytest.raises(exc, match=match):  # type: ignore[arg-type]
                native.read_entries(**{**good, **change})  # type: ignore[arg-type]
            assert (dst == SENTINEL).all(), change
    finally:
        os.close(fd)


def test_staging_made_ahead_is_kept_for_the_next_calls(tmp_path: Path) -> None:
    """``reserve_io_staging`` tops the workers' staging pool up (a second call has nothing left to
    make) and refuses a size no worker would keep; the buffers serve the reads that follow."""
    native.reserve_io_staging(native.io_threads(), 2 << 20)
    assert native.reserve_io_staging(native.io_threads(), 2 << 20) == 0
    assert native.reserve_io_staging(1, 1 << 20) == 0  # smaller than what is kept: kept ones fit
    with pytest.raises(ValueError, match="more than a kept buffer"):
        native._core.reserve_io_staging(1, 64 << 20)
    rng = np.random.default_rng(6)
    es = entries(rng, 8)
    fd, offsets = write_file(tmp_path / "region", [e.bytes for e in es])
    try:
        dst = np.full(1 << 20, SENTINEL, np.uint8)
        got, parts = read([fd], [offsets[0]], [0, 8], es, dst)
        assert got == [EntryVerdict.OK] * 8
        assert all(gathered(dst, ps) == e.payload for e, ps in zip(es, parts, strict=True))
    finally:
        os.close(fd)
