"""Which SGLang we run under, checked once at import of the backend, with a clear message.

Supported: sglang >= 0.5.9 (the release with ``@file.yaml`` extra config and runtime attach);
tested on 0.5.23. SGLang is not a hard dependency of this package: users bring their own build.
"""

from __future__ import annotations

import logging
import re
from importlib import metadata
from typing import Any

log = logging.getLogger(__name__)
MIN_SGLANG = (0, 5, 9)
TESTED_SGLANG = "0.5.23"


def parse_version(text: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text.split("+")[0])[:3]
    return tuple(int(n) for n in numbers)


def check_sglang_version() -> str:
    """Return the installed SGLang version; ImportError naming the fix when it is missing or too old."""
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        raise ImportError(
            "hicache-mooncake's backend runs inside SGLang, which is not installed: "
            "pip install 'sglang>=0.5.9' (tested with 0.5.23)"
        ) from None
    if parse_version(version) < MIN_SGLANG:
        raise ImportError(
            f"hicache-mooncake needs sglang >= {'.'.join(map(str, MIN_SGLANG))} "
            f"(dynamic backends with @file.yaml extra config and runtime attach); found {version}"
        )
    if version != TESTED_SGLANG:
        log.info("sglang %s: hicache-mooncake is tested with %s", version, TESTED_SGLANG)
    return version


def config_field(storage_config: Any, name: str, default: Any) -> Any:
    """Read a ``HiCacheStorageConfig`` field by name (its positional order changed across releases)."""
    value = getattr(storage_config, name, default)
    return default if value is None else value
