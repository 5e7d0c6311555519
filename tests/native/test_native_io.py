"""Batch I/O on native workers: real files (O_DIRECT on the test's file system), per-item results
as numbers, and the deadline: nothing is written into the caller's buffer after the call returned."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hicache_mooncake import native

PAGE = 4096


def open_direct(path: Path) -> int:
    """An O_DIRECT fd on the test's file system (tmp is ext4 here and in CI)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)


def test_write_then_read_back_with_o_direct_from_unaligned_buffers(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, size=64 * PAGE + 1, dtype=np.uint8)
    fd = open_direct(tmp_path / "pages")
    try:
        n = 16
        lengths = [PAGE * int(k) for k in rng.integers(1, 4, size=n)]
        file_offsets = [i * 4 * PAGE for i in range(n)]
        buf_offsets = [1 + i * 3 * PAGE for i in range(n)]  # odd: never 4096-aligned in memory
        wrote = native.pwrite_batch(fd, data, buf_offsets, lengths, file_offsets, 5.0)
        assert wrote.tolist() == lengths
        back = np.zeros(n * 3 * PAGE + 7, dtype=np.uint8)
        got_offsets = [7 + i * 3 * PAGE for i in range(n)]
        read = native.pread_batch(fd, back, got_offsets, lengths, file_offsets, 5.0)
        assert read.tolist() == lengths
        for b, g, ln in zip(buf_offsets, got_offsets, lengths, strict=True):
            assert np.array_equal(back[g : g + ln], data[b : b + ln])
        # One bad item fails alone, as a number: an O_DIRECT offset that is not aligned.
        read = native.pread_batch(fd, back, [0, PAGE], [PAGE, PAGE], [100, 0], 5.0)
        assert read.tolist() == [-errno.EINVAL, PAGE]
    finally:
        os.close(fd)


def test_reads_past_the_end_are_short_and_buffered_files_work(tmp_path: Path) -> None:
    path = tmp_path / "short"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(b"." * 40)
        res = native.pread_batch(fd, buf, [0, 20, 30], [4, 10, 5], [0, 6, 100], 5.0)
        assert res.tolist() == [4, 4, 0]
        assert bytes(buf) == b"0123" + b"." * 16 + b"6789" + b"." * 16
        res = native.pwrite_batch(fd, b"abc", [0], [3], [0], 5.0)  # the fd is read-only
        assert res.tolist() == [-errno.EBADF]
    finally:
        os.close(fd)


def test_timeout_zero_starts_nothing_and_leaves_the_buffer_untouched(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * PAGE)
    fd = os.open(path, os.O_RDWR)
    try:
        buf = bytearray(b"\xab" * PAGE)
        res = native.pread_batch(fd, buf, [0, 100], [100, 100], [0, 100], 0)
        assert res.tolist() == [-errno.ETIMEDOUT] * 2
        assert buf == bytearray(b"\xab" * PAGE)
        res = native.pwrite_batch(fd, bytes(PAGE), [0], [PAGE], [0], 0.0)
        assert res.tolist() == [-errno.ETIMEDOUT]
        time.sleep(0.05)
        assert path.read_bytes() == b"x" * PAGE  # the timed-out write never ran
    finally:
        os.close(fd)


def test_reads_done_after_the_deadline_never_land_in_the_callers_buffer() -> None:
    """32 reads of 4 MiB from /dev/zero cannot all finish in a few ms: the call returns by its
    deadline, the late items say -ETIMEDOUT, and their bytes (zeros) never reach the buffer, even
    once the workers finished them. Repeated until a read was in flight at a deadline (the pool
    counts such reads), so the late path is known to have run."""
    item, n = 4 << 20, 32
    buf = np.empty(n * item, dtype=np.uint8)
    fd = os.open("/dev/zero", os.O_RDONLY)
    late_before = native.io_late_items()[0]
    try:
        for attempt in range(12):
            buf.fill(0xAB)
            start = time.monotonic()
            res = native.pread_batch(
                fd, buf, [i * item for i in range(n)], [item] * n, [0] * n, 0.001 * (1 + attempt % 4)
            )
            assert time.monotonic() - start < 2.0
            assert set(res.tolist()) <= {item, -errno.ETIMEDOUT}
            time.sleep(0.2)  # the pool finishes the late items into its own staging
            for i, r in enumerate(res.tolist()):
                region = buf[i * item : (i + 1) * item]
                if r == item:
                    assert not region.any()
                else:
                    assert (region == 0xAB).all(), f"item {i} timed out but its bytes were written"
            if native.io_late_items()[0] > late_before:
                break
    finally:
        os.close(fd)  # the workers read on their own dup of it
    assert native.io_late_items()[0] > late_before, "no read was ever in flight at a deadline"


def test_bad_arguments_raise_before_any_io(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"y" * 100)
    fd = os.open(path, os.O_RDWR)
    try:
        buf = bytearray(b"\x00" * 50)
        with pytest.raises(ValueError, match=r"item 1: buf offset 40 \+ length 20 > buffer size 50"):
            native.pread_batch(fd, buf, [0, 40], [10, 20], [0, 0], 1.0)
        with pytest.raises(ValueError, match=r"file_offsets\[0\] is negative: -5"):
            native.pread_batch(fd, buf, [0], [10], [-5], 1.0)
        with pytest.raises(ValueError, match="item 0: file offset 18446744073709551615"):
            native.pread_batch(fd, buf, [0], [10], [2**64 - 1], 1.0)
        with pytest.raises(TypeError, match="buf is read-only"):
            native.pread_batch(fd, b"\x00" * 50, [0], [10], [0], 1.0)
        with pytest.raises(ValueError, match="fd must be a file descriptor"):
            native.pread_batch(-1, buf, [0], [10], [0], 1.0)
        assert buf == bytearray(50)
    finally:
        os.close(fd)


def test_threads_share_the_pool(tmp_path: Path) -> None:
    fds = [os.open(tmp_path / f"t{i}", os.O_RDWR | os.O_CREAT) for i in range(4)]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            rng = np.random.default_rng(t)
            for _ in range(20):
                data = rng.integers(0, 256, size=8 * PAGE, dtype=np.uint8)
                offsets = [i * PAGE for i in range(8)]
                assert (
                    native.pwrite_batch(fds[t], data, offsets, [PAGE] * 8, offsets, 10.0).tolist()
                    == [PAGE] * 8
                )
                back = np.empty_like(data)
                assert (
                    native.pread_batch(fds[t], back, offsets, [PAGE] * 8, offsets, 10.0).tolist()
                    == [PAGE] * 8
                )
                assert np.array_equal(back, data)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        for fd in fds:
            os.close(fd)
    assert not errors, errors[0]


def test_zero_length_items_on_empty_buffers(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "empty", os.O_RDWR | os.O_CREAT)
    try:
        assert native.pwrite_batch(fd, b"", [0], [0], [0], 1.0).tolist() == [0]
        assert native.pread_batch(fd, bytearray(), [0], [0], [0], 1.0).tolist() == [0]
        assert native.pread_batch(fd, bytearray(), [], [], [], 1.0).tolist() == []
    finally:
        os.close(fd)
    native.copy_pages(bytearray(), [0], b"", [0], [0])
