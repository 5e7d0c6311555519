"""``native.write_entries``: SSD entries laid out and written by the native workers, byte for
byte what the format's Python reference (``ssd/format.py``'s ``EntryHeader``, python-xxhash)
lays out, staged and borrowed (in place), with parts anywhere in several sources; bad arguments
raise before any I/O; a deadline that passed writes nothing; each run fails on its own."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash
from test_native_read_entries import Entry

from hicache_mooncake import native
from hicache_mooncake.ssd.format import BLOCK, entry_size, parse_entry_header

FILE_AT = BLOCK  # entries start after a region header block


def _aligned(n: int) -> np.ndarray:
    raw = np.zeros(n + BLOCK, np.uint8)
    at = (-raw.ctypes.data) % BLOCK
    return raw[at : at + n]


def _spec(
    payloads: list[bytes], run_sizes: list[int], fd: int, split: bool, srcs_per_entry: bool
) -> tuple[dict[str, object], list[Entry]]:
    """Arguments for ``payloads`` in runs of ``run_sizes`` entries back to back from FILE_AT;
    ``split``: each payload in two parts; ``srcs_per_entry``: each entry's parts in a source of
    its own (else all in one aligned source, back to back)."""
    keys = [f"entry-{i}".encode() for i in range(len(payloads))]
    one = _aligned(sum(entry_size(len(p)) for p in payloads) or BLOCK)
    srcs: list[object] = [] if srcs_per_entry else [one]
    part_srcs: list[int] = []
    src_offsets: list[int] = []
    lengths: list[int] = []
    part_items = [0]
    at = 0
    for p in payloads:
        cuts = [0, len(p) // 2, len(p)] if split and len(p) > 1 else [0, len(p)]
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            if srcs_per_entry:
                srcs.append(bytearray(p[lo:hi]))
                part_srcs.append(len(srcs) - 1)
                src_offsets.append(0)
            else:
                one[at + lo : at + hi] = np.frombuffer(p[lo:hi], np.uint8)
                part_srcs.append(0)
                src_offsets.append(at + lo)
            lengths.append(hi - lo)
        at += entry_size(len(p))
        part_items.append(len(lengths))
    run_items = list(np.cumsum([0, *run_sizes]))
    offsets, pos = [], FILE_AT
    for r in range(len(run_sizes)):
        offsets.append(pos)
        pos += sum(entry_size(len(payloads[k])) for k in range(run_items[r], run_items[r + 1]))
    expected = [Entry(k, p, seq=100 + i, gen=9) for i, (k, p) in enumerate(zip(keys, payloads, strict=True))]
    args: dict[str, object] = dict(
        fds=[fd] * len(run_sizes), run_offsets=offsets, run_items=run_items,
        payload_lengths=[len(p) for p in payloads], gens=[9] * len(payloads),
        seqs=[100 + i for i in range(len(payloads))], keys=keys, part_items=part_items, srcs=srcs,
        part_srcs=part_srcs, src_offsets=src_offsets, part_lengths=lengths,
    )  # fmt: skip
    return args, expected


def _file(tmp_path: Path, direct: bool) -> int:
    path = tmp_path / "region.bin"
    path.write_bytes(b"\xee" * (64 << 20))
    return os.open(path, os.O_RDWR | (os.O_DIRECT if direct else 0))


@pytest.mark.parametrize("borrow", [False, True])
@pytest.mark.parametrize("split", [False, True])
def test_entries_on_disk_are_the_python_formats_bytes(tmp_path: Path, borrow: bool, split: bool) -> None:
    rng = np.random.default_rng(7 + borrow + 2 * split)
    sizes = [1, 100, 4096, 5000, 3 * 4096, 70_000, 0, 1 << 20]
    payloads = [rng.bytes(int(s)) for s in sizes] * 2
    fd = _file(tmp_path, direct=False)
    try:
        for srcs_per_entry in (False, True):
            args, expected = _spec(payloads, [3, 1, 5, 7], fd, split, srcs_per_entry)
            res, late = native.write_entries(**args, borrow=borrow, timeout_s=30)  # type: ignore[arg-type]
            assert late is None
            bounds = [0, 3, 4, 9, 16]
            run_bytes = [
                sum(len(e.bytes) for e in expected[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)
            ]
            assert res.tolist() == run_bytes
            data = os.pread(fd, sum(run_bytes), FILE_AT)
            assert data == b"".join(bytes(e.bytes) for e in expected)
            hdr, why = parse_entry_header(data[:BLOCK])
            assert hdr is not None and hdr.payload_hash == xxhash.xxh3_64_intdigest(payloads[0]), why
            os.pwrite(fd, b"\xee" * sum(run_bytes), FILE_AT)
    finally:
        os.close(fd)


@pytest.mark.parametrize("borrow", [False, True])
def test_o_direct_writes_read_back_through_read_entries(tmp_path: Path, borrow: bool) -> None:
    """Aligned sources written in place (borrowed) or staged on an O_DIRECT file: every entry
    reads back as OK through the native read path."""
    rng = np.random.default_rng(3)
    payloads = [rng.bytes(n) for n in (4096, 8192, 1 << 20, 3 * 4096, 64 << 10)]
    fd = _file(tmp_path, direct=True)
    try:
        args, expected = _spec(payloads, [2, 3], fd, split=True, srcs_per_entry=False)
        res, late = native.write_entries(**args, borrow=borrow, timeout_s=30)  # type: ignore[arg-type]
        assert late is None and (res > 0).all(), res
        dst = np.zeros(sum(len(p) for p in payloads), np.uint8)
        starts = np.cumsum([0, *[len(p) for p in payloads]])
        got = native.read_entries(
            fds=[fd], run_offsets=[FILE_AT], run_items=[0, len(payloads)],
            payload_lengths=[len(p) for p in payloads], gens=[9] * len(payloads),
            seqs=[100 + i for i in range(len(payloads))], keys=[e.key for e in expected],
            part_items=list(range(len(payloads) + 1)), dst=dst, dst_offsets=starts[:-1],
            part_lengths=[len(p) for p in payloads], max_key=1024, timeout_s=30,
        )  # fmt: skip
        assert got.tolist() == [native.EntryVerdict.OK] * len(payloads)
        assert dst.tobytes() == b"".join(payloads)
    finally:
        os.close(fd)


def test_a_passed_deadline_writes_nothing(tmp_path: Path) -> None:
    fd = _file(tmp_path, direct=False)
    try:
        args, _ = _spec([b"x" * 5000, b"y" * 100], [1, 1], fd, split=False, srcs_per_entry=False)
        res, late = native.write_entries(**args, borrow=False, timeout_s=0)  # type: ignore[arg-type]
        assert late is None and res.tolist() == [-errno.ETIMEDOUT] * 2
        assert os.pread(fd, 4 * BLOCK, FILE_AT) == b"\xee" * (4 * BLOCK)
    finally:
        os.close(fd)


def test_a_failed_run_fails_alone(tmp_path: Path) -> None:
    """A run on a read-only descriptor fails with its errno; the other run is written."""
    fd = _file(tmp_path, direct=False)
    ro = os.open(tmp_path / "region.bin", os.O_RDONLY)
    try:
        args, expected = _spec([b"a" * 5000, b"b" * 5000], [1, 1], fd, split=False, srcs_per_entry=False)
        args["fds"] = [fd, ro]
        res, late = native.write_entries(**args, borrow=False, timeout_s=30)  # type: ignore[arg-type]
        assert late is None and res.tolist() == [len(expected[0].bytes), -errno.EBADF]
        assert os.pread(fd, len(expected[0].bytes), FILE_AT) == bytes(expected[0].bytes)
    finally:
        os.close(ro)
        os.close(fd)


def test_writes_in_flight_at_the_deadline_come_back_to_wait_for(tmp_path: Path) -> None:
    """Many large runs and a deadline of 1 ms: runs not started never write; a run whose payload
    was taken is still written, and ``WritesInFlight.wait`` returns once every write ended."""
    fd = _file(tmp_path, direct=False)
    try:
        payloads = [bytes([i]) * (4 << 20) for i in range(12)]
        args, expected = _spec(payloads, [1] * 12, fd, split=False, srcs_per_entry=False)
        seen_late = False
        for _ in range(20):
            res, late = native.write_entries(**args, borrow=False, timeout_s=0.001)  # type: ignore[arg-type]
            if late is not None:
                seen_late = True
                assert late.wait(30)
            assert all(r in (-errno.ETIMEDOUT, len(expected[0].bytes)) for r in res.tolist())
            if seen_late:
                break
        assert seen_late, "no write was still under way 1 ms after its call began"
    finally:
        os.close(fd)


def test_bad_arguments_raise_before_any_io(tmp_path: Path) -> None:
    fd = _file(tmp_path, direct=False)
    try:
        good, _ = _spec([b"a" * 5000, b"b" * 300], [2], fd, split=False, srcs_per_entry=False)
        bad_cases: list[tuple[dict[str, object], str]] = [
            ({"part_srcs": [0, 1]}, "source"),
            ({"src_offsets": [0, 1 << 40]}, "src offset"),
            ({"part_lengths": [5000, 299]}, "parts hold"),
            ({"keys": [b"k" * BLOCK, b"x"]}, "longer than"),
            ({"run_items": [0, 1]}, "run_items"),
            ({"fds": [-1]}, "file descriptor"),
            ({"run_offsets": [1 << 63]}, "largest file offset"),
        ]
        for change, match in bad_cases:
            with pytest.raises(ValueError, match=match):
                native.write_entries(**{**good, **change}, borrow=False, timeout_s=30)  # type: ignore[arg-type]
        assert os.pread(fd, 4 * BLOCK, FILE_AT) == b"\xee" * (4 * BLOCK)
        time.sleep(0)
    finally:
        os.close(fd)
