"""Health of the engine's disks (:class:`Health`): degraded after a timeout, back after a probe.

When a call runs past its deadline (a stalled or dying disk), :meth:`Health.trip` marks the
engine *degraded*: one warning line, and from then on data calls return at once (a put is False,
a get a miss, ``contains`` False) instead of queueing behind I/O that does not finish. A daemon
thread then probes every ``interval_s``: in each directory a 4 KiB write, ``fsync`` and read back
of a small file kept for the purpose, bounded by ``timeout_s``; when a probe passes, the engine is
healthy again (one info line). A probe stuck in the kernel is never piled up on: the next one
starts only after it returned. The probe file is created at open, so a probe needs no free space.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from .private_dir import FILE_MODE, O_NOFOLLOW

log = logging.getLogger("hicache_mooncake.ssd")

PROBE_NAME = "hicache-ssd.probe"
_PROBE_BYTES = 4096


def prepare_probe(directory: str) -> None:
    """Create the probe file (best effort: a full disk leaves it to the first probe)."""
    path = os.path.join(directory, PROBE_NAME)
    with contextlib.suppress(OSError):
        if os.path.getsize(path) == _PROBE_BYTES:
            return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW, FILE_MODE)
        try:
            os.pwrite(fd, bytes(_PROBE_BYTES), 0)
            os.fsync(fd)
        finally:
            os.close(fd)


def probe_once(directory: str) -> None:
    """Write, fsync and read back the probe file; raises OSError on failure."""
    path = os.path.join(directory, PROBE_NAME)
    stamp = time.time_ns().to_bytes(8, "little") * (_PROBE_BYTES // 8)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW, FILE_MODE)
    try:
        if os.pwrite(fd, stamp, 0) != len(stamp):
            raise OSError("short probe write")
        os.fsync(fd)
        if os.pread(fd, len(stamp), 0) != stamp:
            raise OSError("probe read back different bytes")
    finally:
        os.close(fd)


class Health:
    def __init__(self, dirs: tuple[str, ...], timeout_s: float, interval_s: float) -> None:
        self.dirs = dirs
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.degraded = False
        self.reason = ""
        self.since = 0.0
        self.trips = 0
        self.recoveries = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe_thread: threading.Thread | None = None

    def trip(self, reason: str) -> None:
        """Mark degraded (once per episode: one log line) and start probing."""
        with self._lock:
            if self.degraded or self._stop.is_set():
                return
            self.degraded = True
            self.reason = reason
            self.since = time.monotonic()
            self.trips += 1
            start = self._thread is None or not self._thread.is_alive()
            if start:
                self._thread = threading.Thread(
                    target=self._probe_loop, name="hicache-ssd-health", daemon=True
                )
        log.warning(
            "ssd %s: degraded (%s); calls are skipped until a health probe passes",
            ",".join(self.dirs), reason,
        )  # fmt: skip
        if start and self._thread is not None:
            self._thread.start()

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._probe():
                with self._lock:
                    self.degraded = False
                    self.recoveries += 1
                    took = time.monotonic() - self.since
                log.warning("ssd %s: healthy again after %.1fs (probe passed)", ",".join(self.dirs), took)
                return

    def _probe(self) -> bool:
        if self._probe_thread is not None and self._probe_thread.is_alive():
            return False  # the previous probe is still stuck in the kernel
        box: list[bool] = []

        def run() -> None:
            try:
                for d in self.dirs:
                    probe_once(d)
                box.append(True)
            except OSError as e:
                log.debug("ssd health probe failed: %s", e)

        self._probe_thread = threading.Thread(target=run, name="hicache-ssd-probe", daemon=True)
        self._probe_thread.start()
        self._probe_thread.join(self.timeout_s)
        return bool(box) and not self._probe_thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
