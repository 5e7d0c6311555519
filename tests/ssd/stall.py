"""Disks that stall, for deadline tests.

* :class:`LoopStall` (root): a small ext4 image on a loop device. ``freeze()`` runs
  ``fsfreeze -f`` (every write, fsync and metadata change blocks in the kernel) and throttles
  reads of the loop device to 1 byte/s through the blkio cgroup (O_DIRECT reads block in the
  block layer); ``thaw()`` undoes both. A real stalled disk: the I/O threads sit in the kernel.
* :class:`SyscallStall` (any user): the file syscalls the engine uses (``pwritev``, ``preadv``,
  ``pwrite``, ``pread``, ``write``, ``fsync``, ``fdatasync``, ``posix_fallocate``) block while
  frozen when their fd is a file under the stalled directory; other fds pass through.

Both always thaw at the end (a test that fails while frozen must not leave a frozen filesystem).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import Any

_THROTTLE = "/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device"


class SyscallStall:
    name = "syscall"

    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path)
        os.makedirs(self.path, exist_ok=True)
        self._thawed = threading.Event()
        self._thawed.set()
        self._saved: dict[str, Callable[..., Any]] = {}
        self.stalled_calls = 0

    def _mine(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.path + os.sep)
        except OSError:
            return False

    def install(self) -> None:
        for name in (
            "pwritev",
            "preadv",
            "pwrite",
            "pread",
            "write",
            "fsync",
            "fdatasync",
            "posix_fallocate",
        ):
            orig = getattr(os, name)
            self._saved[name] = orig

            def wrapped(fd: int, *a: Any, _orig: Callable[..., Any] = orig, **kw: Any) -> Any:
                if not self._thawed.is_set() and self._mine(fd):
                    self.stalled_calls += 1
                    self._thawed.wait()
                return _orig(fd, *a, **kw)

            setattr(os, name, wrapped)

    def uninstall(self) -> None:
        self.thaw()
        for name, orig in self._saved.items():
            setattr(os, name, orig)
        self._saved.clear()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()


class LoopStall:
    name = "fsfreeze"

    def __init__(self, workdir: str, size_mb: int = 64) -> None:
        self.image = os.path.join(workdir, f"disk-{uuid.uuid4().hex[:6]}.img")
        self.path = os.path.join(workdir, f"mnt-{uuid.uuid4().hex[:6]}")
        self.device = ""
        self.frozen = False
        self.throttled = False
        with open(self.image, "wb") as f:
            f.truncate(size_mb << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", self.image], check=True, capture_output=True)
        os.makedirs(self.path)
        subprocess.run(
            ["mount", "-o", "loop", self.image, self.path], check=True, capture_output=True, text=True
        )
        self.device = subprocess.run(
            ["findmnt", "-no", "SOURCE", self.path], check=True, capture_output=True, text=True
        ).stdout.strip()
        st = os.stat(self.device)
        self.majmin = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"

    @staticmethod
    def available() -> str:
        """Empty when this machine can build one, else why not."""
        if os.geteuid() != 0:
            return "not root"
        for tool in ("mkfs.ext4", "fsfreeze", "mount", "umount", "findmnt"):
            if shutil.which(tool) is None:
                return f"{tool} not installed"
        if not os.path.exists("/dev/loop-control"):
            return "no loop devices"
        if not os.path.exists(_THROTTLE):
            return "no blkio throttle (cgroup v1) to stall reads"
        return ""

    def freeze(self) -> None:
        with open(_THROTTLE, "w") as f:
            f.write(f"{self.majmin} 1\n")
        self.throttled = True
        subprocess.run(["fsfreeze", "-f", self.path], check=True, capture_output=True)
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            subprocess.run(["fsfreeze", "-u", self.path], check=False, capture_output=True)
            self.frozen = False
        if self.throttled:
            with open(_THROTTLE, "w") as f:
                f.write(f"{self.majmin} 0\n")
            self.throttled = False

    def destroy(self) -> None:
        self.thaw()
        with contextlib.suppress(Exception):
            subprocess.run(["umount", self.path], check=False, capture_output=True, timeout=60)
        with contextlib.suppress(Exception):
            subprocess.run(["umount", "-l", self.path], check=False, capture_output=True, timeout=60)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
        with contextlib.suppress(OSError):
            os.unlink(self.image)
