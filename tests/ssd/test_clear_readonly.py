"""A clear whose new epoch cannot be written because the filesystem went read-only is never undone
by a restart (issue 48, item 2).

The filesystem is real: an ext4 image on a loop device, mounted ``errors=remount-ro``, made to go
read-only under the open engine by ext4's own error path (``trigger_fs_error``, what the kernel
does on a metadata error), exactly as a dying disk does it. Then: ``clear`` is False and the
engine refuses everything; after the filesystem is checked and mounted again and the engine
restarts, none of the cleared pages is served and the engine still refuses, until the operator's
repair (the command the error line names) finishes the clear."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.ssd.clear_record import RECORDS_ENV, REPAIR_COMMAND, find_failures
from hicache_mooncake.ssd.clear_record import main as clear_record_main
from hicache_mooncake.ssd.state import StateFile

real_state_write = StateFile.write

PAGE = 64 << 10
PAGES = 180


def run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}"


class Ext4:
    """An ext4 image mounted on a loop device (root)."""

    def __init__(self, base: Path) -> None:
        self.image = base / "fs.img"
        self.mnt = base / "mnt"
        self.mnt.mkdir()
        with open(self.image, "wb") as f:
            f.truncate(96 << 20)
        run("mkfs.ext4", "-q", "-F", str(self.image))
        self.mounted = self.read_only = False

    def mount(self) -> None:
        run("mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.mnt))
        self.mounted, self.read_only = True, False

    def umount(self) -> None:
        if self.mounted:
            run("umount", str(self.mnt))
            self.mounted = False

    def go_read_only(self) -> None:
        """ext4's error path: the filesystem is remounted read-only under every open file."""
        if self.read_only:
            return
        source = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(self.mnt)], capture_output=True, text=True, check=True
        ).stdout.strip()
        with open(f"/sys/fs/ext4/{os.path.basename(source)}/trigger_fs_error", "w") as f:
            f.write("hicache-mooncake test: the disk went bad\n")
        with pytest.raises(OSError):
            (self.mnt / "probe").write_bytes(b"x")
        self.read_only = True

    def check(self) -> None:
        """e2fsck after the error (what an operator does before mounting again)."""
        r = subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: errors corrected


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[Ext4]:
    fs = Ext4(tmp_path)
    fs.mount()
    try:
        yield fs
    finally:
        if fs.mounted:
            with contextlib.suppress(Exception):
                subprocess.run(["umount", "-l", str(fs.mnt)], capture_output=True, timeout=60)


def page(key: str) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def engine_in(d: Path) -> SsdEngine:
    engine = SsdEngine(
        SsdOptions(dirs=(str(d),), capacity_bytes=32 << 20, region_size=1 << 20, direct_io="off")
    )
    assert engine.wait_recovered(60)
    return engine


def served(engine: SsdEngine, keys: list[str]) -> list[str]:
    out = []
    for k in keys:
        buf = np.zeros(PAGE, np.uint8)
        if engine.contains(k) or engine.get_into(k, [memoryview(buf)]):
            out.append(k)
    return out


@pytest.mark.parametrize("when", ["before_the_clear", "during_the_epoch_write"])
def test_a_clear_that_fails_on_a_read_only_filesystem_stays_refused_across_a_restart(
    ext4: Ext4, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, when: str
) -> None:
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "records"))  # outside the ext4 filesystem
    d = ext4.mnt / "ssd"
    d.mkdir()
    keys = [f"old{i:03d}" for i in range(PAGES)]
    e = engine_in(d)
    try:
        for i in range(0, PAGES, 12):
            assert all(e.put_batch([(k, [memoryview(page(k))]) for k in keys[i : i + 12]]))
        assert e.sync()
        os.sync()  # the pages are on the device before it fails
        if when == "before_the_clear":
            ext4.go_read_only()
        else:  # the clear has dropped everything in memory; its epoch write meets the error
            real_write = StateFile.write

            def failing_disk(self: StateFile, state: Any, durable: bool = True) -> None:
                if durable:
                    ext4.go_read_only()
                real_write(self, state, durable)

            monkeypatch.setattr(StateFile, "write", failing_disk)
        with caplog.at_level(logging.ERROR, logger="hicache_mooncake.ssd"):
            assert e.clear() is False
        monkeypatch.setattr(StateFile, "write", real_state_write)
        st = e.stats()
        assert st["refusing"].startswith("clear failed")
        assert served(e, keys) == []
        assert e.put("new", [memoryview(page("new"))]) is False
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert any(REPAIR_COMMAND in m and str(d) in m for m in errors), errors
    finally:
        e.close()
    ext4.umount()
    ext4.check()
    ext4.mount()  # writable again
    # the restart: still refused, nothing cleared comes back
    with caplog.at_level(logging.ERROR, logger="hicache_mooncake.ssd"), engine_in(d) as e2:
        assert served(e2, keys) == []
        assert e2.put("new", [memoryview(page("new"))]) is False
        assert e2.stats()["refusing"].startswith("clear failed before this start")
    assert any(REPAIR_COMMAND in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    (outside,) = find_failures([str(d)])  # the SSD directory was read-only: recorded outside it
    assert outside.startswith(str(tmp_path / "records"))
    assert clear_record_main(["--repair", str(d)]) == 0  # the operator acts
    assert find_failures([str(d)]) == []
    with engine_in(d) as e3:
        assert served(e3, keys) == []
        assert e3.put("new", [memoryview(page("new"))]) and served(e3, ["new"]) == ["new"]
