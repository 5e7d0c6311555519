"""What a root log handler (SGLang's, the CLI's) receives after our repeat limiter: the lines a
user actually sees (``caplog`` sees every record, before the limiter)."""

from __future__ import annotations

import logging


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def matching(self, text: str) -> list[str]:
        return [ln for ln in self.lines if text in ln]
