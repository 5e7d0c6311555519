"""Bounded logging of repeated events: a flood of bad input must not become a flood of log lines."""

from __future__ import annotations


def worth_logging(count: int) -> bool:
    """True for the 1st, 2nd, 4th, 8th ... occurrence: log2(n) lines for n events."""
    return count > 0 and count & (count - 1) == 0
