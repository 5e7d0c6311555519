"""The host cache service's own health, checked in the background (``ServiceWatch``).

Every ``interval_s`` (cheap: one ``stat`` per path), and every ``probe_every_s`` a write probe:

- **An SSD directory** that is gone, is no longer the directory the engine opened (another inode:
  removed and made again, something mounted over it), or cannot be written (the probe creates,
  writes, fsyncs and removes a small file; a full disk is not a failure): the SSD tier is degraded
  as a stalled disk degrades it (``SsdEngine.degrade``: puts False, gets and lookups misses at
  once, ``degraded`` in its stats and metrics), with one error line per episode naming the
  directory and the fix. While the problem lasts it is degraded again at every check (the engine's
  own probe may pass in a directory made again, whose files are not the engine's); when the same
  directory is writable again the engine's probe brings the tier back.
- **The service's socket or lock file** gone or replaced (the runtime directory removed, an
  operator's ``rm``): no client can reach this service any more, and another service may start
  beside it. ``on_fatal(reason)`` is called once (the service then stops accepting, drains and
  exits non-zero, so a service manager restarts it).

A check never raises (an unexpected error is logged and the next check runs); ``close`` stops the
thread within one interval.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("hicache_mooncake.host_cache")

PROBE_PREFIX = ".hicache-host-cache-probe"
_PROBE_BYTES = 4096


def identity(path: str, follow: bool = True) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path``, None when it does not exist (or cannot be inspected)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_dir(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def write_probe(directory: str) -> None:
    """Create, write, fsync and remove a small file in ``directory``; OSError when it cannot be
    written (ENOSPC is not raised: a full disk is the engine's eviction's business)."""
    path = os.path.join(directory, f"{PROBE_PREFIX}.{os.getpid()}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, bytes(_PROBE_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


@dataclass(frozen=True)
class WatchedFile:
    """A runtime file the service must keep (its socket, its lock) and the identity it had."""

    what: str
    path: str
    ident: tuple[int, int]
    consequence: str
    """What its loss means (logged)."""


class ServiceWatch:
    def __init__(
        self,
        ssd_dirs: Sequence[str],
        degrade_ssd: Callable[[str], None],
        runtime_files: Sequence[WatchedFile],
        on_fatal: Callable[[str], None],
        interval_s: float = 2.0,
        probe_every_s: float = 30.0,
    ) -> None:
        # an open descriptor per directory: the directory the tier opened stays that inode (a
        # directory made again at the path cannot reuse its number), and shows when it is removed
        self._dirs: dict[str, int | None] = {d: _open_dir(d) for d in ssd_dirs}
        self._degrade = degrade_ssd
        self._files = list(runtime_files)
        self._on_fatal = on_fatal
        self.interval_s = interval_s
        self.probe_every_s = probe_every_s
        self._next_probe = time.monotonic() + probe_every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ssd_problem = ""
        """Why the SSD tier is degraded by this watch now ("" when it is not)."""
        self.ssd_episodes = 0
        """How many times an SSD directory problem started."""
        self.fatal = ""
        """Why the service cannot serve ("" while it can)."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hicache-host-cache-health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval_s + 5)
        for directory, fd in list(self._dirs.items()):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._dirs[directory] = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:
                log.exception("host cache health check failed; checking again in %.0f s", self.interval_s)
            if self.fatal:
                return

    def check(self) -> None:
        """One round: the runtime files first (fatal), then the SSD directories."""
        for f in self._files:
            now = identity(f.path, follow=False)
            if now != f.ident:
                state = "was removed" if now is None else "was replaced by another file"
                self.fatal = f"its {f.what} {f.path} {state}"
                log.error(
                    "host cache: %s: %s; stopping (a service manager or the next backend starts a new one)",
                    self.fatal,
                    f.consequence,
                )
                self._on_fatal(self.fatal)
                return
        problem = self._ssd_problem()
        if problem:
            if not self.ssd_problem:
                self.ssd_episodes += 1
                log.error(
                    "host cache: SSD tier degraded: %s; puts are refused and reads are misses until it "
                    "is writable again (a directory removed or made again: restart the service)",
                    problem,
                )
            self.ssd_problem = problem
            self._degrade(f"directory check: {problem}")
        elif self.ssd_problem:
            log.warning(
                "host cache: SSD directory problem gone (%s); the tier's probe restores it", self.ssd_problem
            )
            self.ssd_problem = ""

    def _ssd_problem(self) -> str:
        probe = time.monotonic() >= self._next_probe
        if probe:
            self._next_probe = time.monotonic() + self.probe_every_s
        for directory, fd in self._dirs.items():
            now = identity(directory)
            opened = os.fstat(fd) if fd is not None else None
            if now is None:
                return f"{directory} was removed"
            if opened is not None and opened.st_nlink == 0:
                return f"{directory} was removed and made again (the tier's files are gone)"
            if opened is not None and now != (opened.st_dev, opened.st_ino):
                return f"{directory} is not the directory the tier opened (removed and made again, or mounted over)"
            if probe or self.ssd_problem:
                try:
                    write_probe(directory)
                except OSError as exc:
                    return f"{directory} cannot be written ({exc.strerror or exc})"
        return ""


def watch_service(
    server: Any, socket_path: str, lock_path: str, lock_fd: int, on_fatal: Callable[[str], None]
) -> ServiceWatch:
    """The watch of a serving ``NodeServer`` (its store's SSD tier, its socket, its lock): not
    started yet. The socket's identity is the one it has now (call after ``server.start``)."""
    tiered = getattr(server.store, "store", None)
    ssd = getattr(tiered, "ssd", None)
    engine = getattr(ssd, "engine", None)
    dirs: tuple[str, ...] = tuple(engine.options.dirs) if engine is not None else ()
    files: list[WatchedFile] = []
    # missing already (the server made it at start): removed since, found at the first check
    files.append(
        WatchedFile(
            "socket",
            socket_path,
            identity(socket_path, follow=False) or (-1, -1),
            "no client can reach this service any more",
        )
    )
    st = os.fstat(lock_fd)
    files.append(
        WatchedFile(
            "lock file", lock_path, (st.st_dev, st.st_ino), "another service could start beside this one"
        )
    )
    return ServiceWatch(dirs, engine.degrade if engine is not None else _no_ssd, files, on_fatal)


def _no_ssd(_reason: str) -> None:
    return None
