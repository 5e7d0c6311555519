"""Arena files in a shared-memory directory: created by a node, proven before a client maps them,
and collected when their node is dead.

- A node creates ``<shm_dir>/hicache-node-<id>-<pid>-<epoch>`` exclusively (``O_EXCL``, never
  through a link), locks it (``flock``) for its whole life and writes an ``ArenaHeader`` in it.
- A client (``open_node_arena``) opens only a plain file name inside ITS configured directory
  (relative to a directory descriptor, ``O_NOFOLLOW``), never creates or truncates it, and accepts
  it only when it is a regular file with one link, owned by the expected user, at least the
  advertised size, and its header names the node, epoch, size and token of the handshake.
- ``collect_stale`` removes arenas whose node is gone: the header must prove the file is an arena,
  the creating pid must be dead and the file's lock must be free (the lock is held by a live
  node, whatever pid namespace it runs in). A file that fails any check is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from dataclasses import dataclass

from .arena_header import ARENA_HEADER_SIZE, ArenaHeader
from .processes import pid_alive

log = logging.getLogger(__name__)
PREFIX = "hicache-node-"
_OPEN_EXISTING = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


class ArenaRefused(Exception):
    """A file named as a node arena failed a check; the message says which."""


def safe_node_id(node_id: str) -> str:
    """``node_id`` with every character that is not ``[A-Za-z0-9._-]`` replaced by ``_``."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in node_id)


def arena_file_name(node_id: str, pid: int, epoch: int) -> str:
    return f"{PREFIX}{safe_node_id(node_id)}-{pid}-{epoch}"


def read_header(fd: int) -> ArenaHeader | None:
    try:
        return ArenaHeader.unpack(os.pread(fd, ARENA_HEADER_SIZE, 0))
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class ArenaSpec:
    """Which arena file a node's store creates: the node server picks the directory and the
    identity (node id, epoch, token) its handshake will announce; the store knows the size."""

    shm_dir: str
    node_id: str
    epoch: int
    token: bytes

    def create(self, data_bytes: int) -> ArenaFile:
        """A new arena file of ``ARENA_HEADER_SIZE + data_bytes`` bytes, proven by its header."""
        header = ArenaHeader(
            self.node_id, self.epoch, ARENA_HEADER_SIZE + data_bytes, os.getpid(), self.token
        )
        return ArenaFile(self.shm_dir, header)


class ArenaFile:
    """A node's own arena file: created new, locked while the node lives, unlinked on close."""

    def __init__(self, shm_dir: str, header: ArenaHeader) -> None:
        self.header = header
        self.path = os.path.join(shm_dir, arena_file_name(header.node_id, header.pid, header.epoch))
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # held until close: the node is alive
            os.ftruncate(self.fd, header.size)
            os.pwrite(self.fd, header.pack(), 0)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Unlink, then release the lock (a collector never sees a live arena unlocked)."""
        if self.fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = -1


def open_node_arena(shm_dir: str, advertised_path: str, expect: ArenaHeader, owner_uid: int) -> int:
    """Open (read-write, never create) the arena a node advertised, after proving it is that node's
    arena; returns the descriptor. Raises ``ArenaRefused`` naming the failed check."""
    directory, name = os.path.split(advertised_path)
    if not name.startswith(PREFIX) or name in (".", ".."):
        raise ArenaRefused(f"{advertised_path!r} is not an arena file name")
    if os.path.normpath(directory) != os.path.normpath(shm_dir):
        raise ArenaRefused(f"{advertised_path!r} lies outside the configured shm directory {shm_dir!r}")
    try:
        dir_fd = os.open(shm_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ArenaRefused(f"cannot open shm directory {shm_dir!r}: {exc.strerror}") from None
    try:
        fd = os.open(name, os.O_RDWR | _OPEN_EXISTING, dir_fd=dir_fd)
    except (OSError, ValueError) as exc:
        reason = "it is a symbolic link" if getattr(exc, "errno", None) == errno.ELOOP else str(exc)
        raise ArenaRefused(f"cannot open {advertised_path!r}: {reason}") from None
    finally:
        os.close(dir_fd)
    try:
        _check_arena(fd, advertised_path, expect, owner_uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_arena(fd: int, path: str, expect: ArenaHeader, owner_uid: int) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ArenaRefused(f"{path!r} is not a regular file")
    if st.st_nlink != 1:
        raise ArenaRefused(f"{path!r} has {st.st_nlink} links (an arena has exactly one)")
    if st.st_uid != owner_uid:
        raise ArenaRefused(f"{path!r} is owned by uid {st.st_uid}, expected {owner_uid}")
    if st.st_size < expect.size:
        raise ArenaRefused(f"{path!r} has {st.st_size} bytes, the node advertised {expect.size}")
    got = read_header(fd)
    if got is None:
        raise ArenaRefused(f"{path!r} carries no arena header")
    for field, mine, theirs in (
        ("node id", expect.node_id, got.node_id),
        ("epoch", expect.epoch, got.epoch),
        ("size", expect.size, got.size),
    ):
        if mine != theirs:
            raise ArenaRefused(f"{path!r} is the arena of {field} {theirs!r}, expected {mine!r}")
    if got.token != expect.token:
        raise ArenaRefused(f"{path!r} carries another arena token")


@dataclass(frozen=True, slots=True)
class StaleArena:
    path: str
    node_id: str
    pid: int
    size: int


def collect_stale(shm_dir: str, node_id: str | None = None) -> list[StaleArena]:
    """Remove the arenas in ``shm_dir`` whose node is dead (``node_id``: only that node's);
    returns what was removed. Never removes a file that is not provably a dead node's arena."""
    prefix = PREFIX if node_id is None else f"{PREFIX}{safe_node_id(node_id)}-"
    try:
        dir_fd = os.open(shm_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        log.warning("cannot scan %s for stale arenas: %s", shm_dir, exc.strerror)
        return []
    removed: list[StaleArena] = []
    try:
        for name in os.listdir(dir_fd):
            if name.startswith(prefix):
                found = _collect_one(dir_fd, shm_dir, name, node_id)
                if found is not None:
                    removed.append(found)
    finally:
        os.close(dir_fd)
    return removed


def _collect_one(dir_fd: int, shm_dir: str, name: str, node_id: str | None) -> StaleArena | None:
    try:
        fd = os.open(name, os.O_RDONLY | _OPEN_EXISTING, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        hdr = read_header(fd)
        if hdr is None or (node_id is not None and hdr.node_id != node_id):
            return None
        if hdr.pid == os.getpid() or pid_alive(hdr.pid):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # a live node holds it (e.g. in another pid namespace)
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return None
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return None  # replaced since we opened it
        os.unlink(name, dir_fd=dir_fd)
        return StaleArena(os.path.join(shm_dir, name), hdr.node_id, hdr.pid, st.st_size)
    finally:
        os.close(fd)
