"""Logging of the whole ``hicache_mooncake`` logger tree: one line per cause per interval, and
our level following SGLang's.

``install()`` puts one handler, a ``RepeatLimiter``, on the ``hicache_mooncake`` logger and stops
that logger from propagating; the limiter forwards what it lets through to the root logger's
handlers (SGLang's, or the CLI's), so every module below it (backend, tiers, ssd, transport) is
covered without any of them doing anything. The CLI, the backend and ``FailureLog`` call it; it
is idempotent.

What the limiter promises, per *cause*: for warnings and errors the logger name, level, message
template before ``%`` formatting and exception type (so "demotion of %s failed" for 10,000 keys is
one cause), or an explicit ``extra={"log_cause": ...}``; for INFO lines the exact message (distinct
status lines all pass, a flapping one collapses); DEBUG lines (asked for) are not limited:

- the first occurrence is logged as it is, traceback included;
- further occurrences within ``interval_s`` are counted, not logged;
- the first occurrence after the interval is logged with ``[N more like this in the last Ts]``;
  a cause that stopped occurring gets that line when anything else is logged, or at exit;
- a traceback is printed once per cause per process; later lines carry the exception's one-line
  summary (``OSError: [Errno 28] No space left on device``) instead.

Levels: with ``log_level: unset`` (the schema default) our loggers have no level of their own
and inherit the root logger's, which SGLang sets from ``--log-level``; a level in the YAML is
set on the ``hicache_mooncake`` logger and wins.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

LOGGER_NAME = "hicache_mooncake"
DEFAULT_INTERVAL_S = 60.0
UNSET = "unset"
_MAX_CAUSES = 4096

CauseKey = tuple[str, int, str, str]


@dataclass
class _Cause:
    window_start: float
    suppressed: int = 0
    last: logging.LogRecord | None = None
    traceback_shown: bool = False


class RepeatLimiter(logging.Handler):
    """Collapses repeats of one cause into one line per interval (see the module docstring) and
    forwards what it lets through to ``forward_to`` (the root logger)."""

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        forward_to: logging.Logger | None = None,
    ) -> None:
        super().__init__(logging.NOTSET)
        self.interval_s = interval_s
        self.clock = clock
        self.forward_to = forward_to or logging.getLogger()
        self._causes: dict[CauseKey, _Cause] = {}
        self._state = threading.Lock()
        self._last_sweep = clock()

    # Overrides Handler.handle so the handler lock is not held while the root handlers write.
    def handle(self, record: logging.LogRecord) -> bool:
        if not self.filter(record):
            return False
        for out in self._admit(record):
            self._forward(out)
        return True

    def _forward(self, record: logging.LogRecord) -> None:
        """What propagation would do from ``forward_to`` up, minus the handlers that are also on
        our logger (pytest attaches its capture handlers to non-propagating loggers too: they
        already saw the record)."""
        logger: logging.Logger | None = self.forward_to
        if logger is None or logger.disabled or not logger.filter(record):
            return
        mine = set(logging.getLogger(LOGGER_NAME).handlers)
        found = 0
        while logger is not None:
            for handler in logger.handlers:
                if handler in mine:
                    continue
                found += 1
                if record.levelno >= handler.level:
                    handler.handle(record)
            logger = logger.parent if logger.propagate else None
        if not found and logging.lastResort is not None and record.levelno >= logging.lastResort.level:
            logging.lastResort.handle(record)

    def emit(self, record: logging.LogRecord) -> None:  # handle() does the work
        self.handle(record)

    def flush(self) -> None:
        """Log the pending counts of every cause that has suppressed lines (at exit)."""
        with self._state:
            due = [self._summary(c, self.clock()) for c in self._causes.values() if c.suppressed]
        for out in due:
            if out is not None:
                self._forward(out)

    def _admit(self, record: logging.LogRecord) -> list[logging.LogRecord]:
        if record.levelno < logging.INFO:
            return [record]
        key = _cause_key(record)
        now = self.clock()
        with self._state:
            out = self._sweep(now, skip=key)
            cause = self._causes.get(key)
            if cause is None:
                if len(self._causes) >= _MAX_CAUSES:
                    self._causes.pop(next(iter(self._causes)))
                self._causes[key] = _Cause(now, traceback_shown=_has_exception(record))
                out.append(record)
                return out
            if now - cause.window_start < self.interval_s:
                cause.suppressed += 1
                cause.last = record
                return out
            out.append(self._reported(record, cause, cause.suppressed, now))
            return out

    def _sweep(self, now: float, skip: CauseKey) -> list[logging.LogRecord]:
        """Summaries of causes whose interval ended with suppressed lines (at most every second)."""
        if now - self._last_sweep < 1.0:
            return []
        self._last_sweep = now
        out = []
        for key, cause in self._causes.items():
            if key != skip and cause.suppressed and now - cause.window_start >= self.interval_s:
                summary = self._summary(cause, now)
                if summary is not None:
                    out.append(summary)
        return out

    def _summary(self, cause: _Cause, now: float) -> logging.LogRecord | None:
        """The last suppressed record, with the count of the others suppressed before it."""
        if cause.last is None:
            return None
        return self._reported(cause.last, cause, cause.suppressed - 1, now)

    def _reported(self, record: logging.LogRecord, cause: _Cause, more: int, now: float) -> logging.LogRecord:
        """A copy of ``record`` to log now; starts the cause's next interval."""
        text = record.getMessage()
        exc = record.exc_info
        if exc is not None and exc[0] is not None and cause.traceback_shown:
            text += f" ({traceback.format_exception_only(exc[0], exc[1])[-1].strip()})"
            exc = None
        if more > 0:
            text += f" [{more} more like this in the last {now - cause.window_start:.0f}s]"
        out = logging.makeLogRecord(record.__dict__)
        out.msg, out.args, out.exc_info, out.exc_text, out.stack_info = text, None, exc, None, None
        cause.traceback_shown = cause.traceback_shown or exc is not None
        cause.window_start, cause.suppressed, cause.last = now, 0, None
        return out


def _has_exception(record: logging.LogRecord) -> bool:
    return bool(record.exc_info and record.exc_info[0] is not None)


def _cause_key(record: logging.LogRecord) -> CauseKey:
    explicit = getattr(record, "log_cause", None)
    if explicit is not None:
        template = str(explicit)
    elif record.levelno < logging.WARNING:
        template = record.getMessage()
    else:
        template = str(record.msg)
    exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
    return (record.name, record.levelno, template, exc_type)


_lock = threading.Lock()
_installed: RepeatLimiter | None = None


def install(limiter: RepeatLimiter | None = None) -> RepeatLimiter:
    """Put the limiter on the ``hicache_mooncake`` logger (idempotent; a given ``limiter``
    replaces the installed one, which tests use for a short interval or a fake clock)."""
    global _installed
    with _lock:
        logger = logging.getLogger(LOGGER_NAME)
        if _installed is not None and (limiter is None or limiter is _installed):
            return _installed
        if _installed is not None:
            logger.removeHandler(_installed)
        _installed = limiter or RepeatLimiter()
        logger.addHandler(_installed)
        logger.propagate = False
        return _installed


def uninstall() -> None:
    """Remove the limiter; our records propagate to the root logger unfiltered again."""
    global _installed
    with _lock:
        if _installed is not None:
            logger = logging.getLogger(LOGGER_NAME)
            logger.removeHandler(_installed)
            logger.propagate = True
            _installed = None


_host_level = logging.NOTSET


def set_host_level(level: int) -> None:
    """The level our loggers take when the YAML leaves ``log_level`` unset. Inside SGLang nobody
    calls this, so unset means the root logger's level (SGLang's ``--log-level``); the CLI sets
    INFO (DEBUG with ``-v``) for our loggers while libraries stay at warnings."""
    global _host_level
    _host_level = level


def host_level() -> int:
    return _host_level


def apply_level(level: str | None) -> None:
    """``unset`` (or None): the host's level (see ``set_host_level``; in SGLang: inherit the root
    logger's); anything else (``debug``, ``INFO`` ...) is set on the ``hicache_mooncake`` logger."""
    logger = logging.getLogger(LOGGER_NAME)
    if level is None or level.lower() == UNSET:
        logger.setLevel(_host_level)
    else:
        logger.setLevel(level.upper())


def flush() -> None:
    """Log the pending repeat counts now (the CLI does at the end of a command)."""
    limiter = _installed
    if limiter is not None:
        limiter.flush()


def configure(level: str | None) -> None:
    """What the backend does at attach: the limiter, then the level of its configuration."""
    install()
    apply_level(level)


@atexit.register
def _flush_at_exit() -> None:
    if not logging.getLogger().handlers:  # nobody logs any more (e.g. a test runner has finished)
        return
    with contextlib.suppress(Exception):  # never fail interpreter shutdown over a log line
        flush()
