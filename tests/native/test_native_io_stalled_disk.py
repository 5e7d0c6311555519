"""pread_batch / pwrite_batch on a really stalled disk (an ext4 loop mount, frozen with fsfreeze,
its O_DIRECT reads throttled to 1 byte/s: tests/ssd/stall.py's LoopStall, root as in CI): the call
returns by its deadline, nothing it returned as -ETIMEDOUT touches the caller's buffer, and a
late write, once the disk is back, writes the bytes the buffer held during the call."""

from __future__ import annotations

import errno
import importlib.util
import os
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from hicache_mooncake import native

PAGE = 4096
N = 4


def load_stall() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "ssd" / "stall.py"
    spec = importlib.util.spec_from_file_location("ssd_stall_for_native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_for(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_stalled_disk_never_holds_the_caller_past_its_deadline(tmp_path: Path) -> None:
    stall = load_stall()
    why = stall.LoopStall.available()
    assert not why, f"this test needs a real stalled disk (root, loop devices, blkio throttling): {why}"
    native.set_io_threads(2 * N)  # the stalled reads and the writes after them all start in time
    loop = stall.LoopStall(str(tmp_path))
    try:
        fd = os.open(os.path.join(loop.path, "pages"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
        try:
            offsets = [i * PAGE for i in range(N)]
            first = np.full(N * PAGE, 0x11, dtype=np.uint8)
            assert native.pwrite_batch(fd, first, offsets, [PAGE] * N, offsets, 10.0).tolist() == [PAGE] * N
            os.fsync(fd)
            late_reads, late_writes = native.io_late_items()

            loop.freeze()
            try:
                buf = np.full(N * PAGE, 0xAB, dtype=np.uint8)
                start = time.monotonic()
                res = native.pread_batch(fd, buf, offsets, [PAGE] * N, offsets, 0.3)
                assert time.monotonic() - start < 2.0
                assert res.tolist() == [-errno.ETIMEDOUT] * N

                second = np.full(N * PAGE, 0x22, dtype=np.uint8)
                start = time.monotonic()
                res = native.pwrite_batch(fd, second, offsets, [PAGE] * N, offsets, 0.3)
                assert time.monotonic() - start < 2.0
                assert res.tolist() == [-errno.ETIMEDOUT] * N
                second.fill(0x33)  # the caller reuses its buffer: the late writes must not see it
            finally:
                loop.thaw()

            # Back: the stalled reads finish into staging and are dropped, the writes land.
            assert wait_for(lambda: native.io_late_items() == (late_reads + N, late_writes + N), 20.0), (
                native.io_late_items(),
                (late_reads, late_writes),
            )
            assert (buf == 0xAB).all()
            back = np.zeros(N * PAGE, dtype=np.uint8)
            assert native.pread_batch(fd, back, offsets, [PAGE] * N, offsets, 10.0).tolist() == [PAGE] * N
            assert (back == 0x22).all()
        finally:
            os.close(fd)
    finally:
        loop.destroy()
