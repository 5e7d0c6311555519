"""Object keys of a batch of page hashes, made and checked in one native call each.

``check_page_keys`` finds the first hash that is not a ``str`` of 1 to ``max_chars`` characters
(the backend's rule for a page hash: ``hicache_mooncake.keys``); ``join_keys`` makes
``prefix + h + tail`` of each hash (the object key of each page) without a Python-level loop.
Both hold the GIL (they read and make str objects) and cost a few microseconds per 128 hashes.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _core


def check_page_keys(hashes: Sequence[object], max_chars: int) -> int:
    """The index of the first item of ``hashes`` that is not a str (subclasses count) of 1 to
    ``max_chars`` characters; -1 when there is none."""
    return _core.check_page_keys(hashes, max_chars)


def join_keys(prefix: str, hashes: Sequence[str], tail: str) -> list[str]:
    """``[prefix + h + tail for h in hashes]``; TypeError naming the index of an item that is
    not a str."""
    return _core.join_keys(prefix, hashes, tail)
