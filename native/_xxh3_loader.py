"""Finds the xxh3 implementation the extension calls; no xxhash source is compiled in.

First choice: python-xxhash's own extension module, which exports ``XXH3_64bits_dispatch`` (it
picks the AVX2/SSE2 variant at run time). Second: the system ``libxxhash.so.0`` and its
``XXH3_64bits`` (a generic build: slower on long inputs). The same values either way (checked at
load against a known digest); ImportError naming both attempts when neither loads.
"""

from __future__ import annotations

import importlib

from . import _core

DISPATCH_SYMBOL = "XXH3_64bits_dispatch"
SYSTEM_LIBRARY = "libxxhash.so.0"
SYSTEM_SYMBOL = "XXH3_64bits"


def set_xxh3_library(library: str, symbol: str) -> None:
    """Makes every later hash use ``symbol`` of ``library`` (OSError when either is missing,
    ValueError when it does not compute xxh3_64). For measurements; the import chose already."""
    _core.set_xxh3_library(library, symbol)


def python_xxhash_library() -> str | None:
    """Path of python-xxhash's extension module (None when python-xxhash is not installed)."""
    try:
        module = importlib.import_module("xxhash._xxhash")
    except ImportError:
        return None
    path = getattr(module, "__file__", None)
    return str(path) if path else None


def load_xxh3() -> tuple[str, str]:
    """Loads xxh3 into ``_core`` and returns (library, symbol); ImportError when nothing loads."""
    attempts: list[str] = []
    candidates = []
    path = python_xxhash_library()
    if path is not None:
        candidates.append((path, DISPATCH_SYMBOL))
    else:
        attempts.append("python-xxhash is not installed")
    candidates.append((SYSTEM_LIBRARY, SYSTEM_SYMBOL))
    for library, symbol in candidates:
        try:
            _core.set_xxh3_library(library, symbol)
        except (OSError, ValueError) as exc:
            attempts.append(str(exc))
            continue
        return library, symbol
    raise ImportError(
        "no xxh3 implementation found for hicache_mooncake.native: "
        + "; ".join(attempts)
        + " (install python-xxhash, a dependency of hicache-mooncake, or the system libxxhash0)"
    )
