"""A backend's link to the host cache service: starts it when it is not running and keeps checking.

``attach`` runs in the backend's constructor: when the service does not answer, it is started
(``autostart``, exactly once per host: ``launcher.start``) and the backend waits for it at most
``host_cache.start_timeout_s``. After that a daemon thread checks the service every
``retry_interval_s`` (a PING; it also keeps this process's connection in use, so the service knows
a client is there) and starts it again when it is gone (killed, crashed, stopped as idle while
this backend was quiet). Data calls never wait for any of this: while the service is away they
are misses / False within ``io.timeout_s``, and the client reconnects at the next call after the
service is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from hicache_mooncake.config import BackendConfig

from . import launcher
from .paths import HostCachePaths

log = logging.getLogger(__name__)
_MAX_BACKOFF_S = 60.0


class ServiceKeeper:
    def __init__(self, config: BackendConfig, ping: Callable[[], bool]) -> None:
        self.config = config
        self.hc = config.host_cache
        self.paths = HostCachePaths.of(self.hc)
        self._ping = ping
        self._stop = threading.Event()
        self._base_backoff = max(self.hc.start_timeout_s, self.hc.retry_interval_s)
        self._next_start = 0.0
        self._backoff = self._base_backoff
        self.starts = 0
        self._thread: threading.Thread | None = None

    def attach(self) -> bool:
        """Make sure the service runs, wait for it (bounded), then keep it in the background.
        True when it answered in time."""
        deadline = time.monotonic() + self.hc.start_timeout_s
        ready = self._ping()
        while not ready:
            self._maybe_start()
            if time.monotonic() >= deadline or self._stop.wait(0.05):
                break
            ready = self._ping()
        if ready:
            self._healthy()
        else:
            log.warning(
                "the host cache %s did not answer within %.1f s (host_cache.start_timeout_s): serving misses "
                "and retrying in the background (service log: %s)",
                self.paths.socket,
                self.hc.start_timeout_s,
                self.paths.log,
            )
        self._thread = threading.Thread(target=self._run, name="hicache-host-cache-keeper", daemon=True)
        self._thread.start()
        return ready

    def _healthy(self) -> None:
        """The service answers: a later loss may start it again at once."""
        self._next_start = 0.0
        self._backoff = self._base_backoff

    def _maybe_start(self) -> None:
        if not self.hc.autostart or time.monotonic() < self._next_start:
            return
        try:
            pid = launcher.start(self.paths, self.config)
        except (OSError, ValueError) as exc:
            log.warning("cannot start the host cache %s: %s", self.paths.socket, exc)
        else:
            if pid is None:
                return  # another process holds the start lock: it is starting one
            self.starts += 1
        # a service that does not come up, or cannot be started, is not tried again at once (a
        # bad YAML, a full disk): one attempt, and one log line, per backoff
        self._next_start = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)

    def _run(self) -> None:
        while not self._stop.wait(self.hc.retry_interval_s):
            try:
                if self._ping():
                    self._healthy()
                else:
                    self._maybe_start()
            except Exception:
                log.exception("host cache keeper check failed; retrying")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
