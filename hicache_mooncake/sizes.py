"""Byte sizes written the way operators write them: ``64GiB``, ``512 MB``, ``4096``.

Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones (KB, MB, GB, TB) are powers
of 1000; ``K``/``M``/``G``/``T`` alone are binary (what ``ulimit``/``dd`` users expect). A bare
integer is bytes. Anything else raises ``ValueError`` naming the bad text.
"""

from __future__ import annotations

import re

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 1000**4,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | float | str) -> int:
    """Return ``value`` in bytes; raise ``ValueError`` for negatives, unknown units or junk."""
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}: expected bytes or a string like '64GiB'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"invalid size {value!r}: must not be negative")
        return int(value)
    match = _PATTERN.match(str(value))
    if not match:
        raise ValueError(f"invalid size {value!r}: expected bytes or a string like '64GiB'")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(
            f"invalid size {value!r}: unknown unit {unit!r} (use KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
        )
    return int(float(number) * factor)


def format_size(num_bytes: float) -> str:
    """Human-readable binary size, e.g. ``1.5GiB``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")
