"""The service lock: an exclusive ``flock`` on ``<name>.lock``, held by the service for its whole life.

Exactly one service runs per name however many backends race to start it: a starter takes the
lock first and hands the SAME open file (the lock goes with it) to the service it spawns, so the
lock is never free between the two; a second starter finds it held and only waits. A service
started by an operator (systemd) takes the lock itself. The holder writes its pid into the file
(for operators and tests). The kernel releases the lock when the holder dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os


def try_lock(path: str) -> int | None:
    """An open descriptor holding the lock, or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def adopt(fd: int) -> bool:
    """A descriptor inherited from the starter: True when it (still) holds the lock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a no-op on the lock we already hold
    except OSError:
        return False
    return True


def write_pid(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def holder_pid(path: str) -> int | None:
    """The pid the holder wrote (None when the file is missing, empty, or not held)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)  # nobody holds it
        return None
    finally:
        os.close(fd)
