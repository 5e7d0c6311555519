from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture
def ssd_dir(tmp_path) -> str:  # type: ignore[no-untyped-def]
    d = tmp_path / "ssd"
    d.mkdir()
    return str(d)


@pytest.fixture
def small_tmpfs(tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """An 8 MiB tmpfs mount (root only); skipped with the reason when mounting fails."""
    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs: {r.stderr.strip() or r.returncode}")
    try:
        yield str(mnt)
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(mnt)


@pytest.fixture(params=["syscall", "fsfreeze"])
def stalling_disk(request, tmp_path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """A directory whose disk can be stalled (``freeze()``) and brought back (``thaw()``):
    a syscall-level stall (any user) and a real frozen ext4 loop mount (root)."""
    from stall import LoopStall, SyscallStall

    if request.param == "syscall":
        stall = SyscallStall(str(tmp_path / "stalled"))
        stall.install()
        try:
            yield stall
        finally:
            stall.uninstall()
        return
    why = LoopStall.available()
    if why:
        pytest.skip(f"real stalled disk needs root, loop devices and blkio throttling: {why}")
    loop = LoopStall(str(tmp_path))
    try:
        yield loop
    finally:
        loop.destroy()
