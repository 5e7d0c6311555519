"""Count failures by cause and log them through the repeat limiter (``hicache_mooncake.logs``): one
line per cause per interval with a count, the traceback once, so a broken disk or network never
floods SGLang's log with one traceback per page."""

from __future__ import annotations

import logging
import threading
from collections import Counter

from hicache_mooncake import logs

log = logging.getLogger("hicache_mooncake")


class FailureLog:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        logs.install()

    def record(self, cause: str, exc: BaseException | None = None) -> None:
        with self._lock:
            self.counts[cause] += 1
        log.warning("hicache-mooncake: %s", cause, exc_info=exc, extra={"log_cause": cause})

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
