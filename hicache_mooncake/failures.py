"""Count failures by cause and log each cause once (then at debug level), so a broken disk or
network never floods SGLang's log with one traceback per page."""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("hicache_mooncake")


class FailureLog:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, cause: str, exc: BaseException | None = None) -> None:
        with self._lock:
            self.counts[cause] += 1
            first = self.counts[cause] == 1
        if first:
            log.warning(
                "hicache-mooncake: %s (further occurrences are counted, logged at debug)", cause, exc_info=exc
            )
        else:
            log.debug("hicache-mooncake: %s", cause, exc_info=exc)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
