"""Byte sizes written the way operators write them: ``64GiB``, ``512 MB``, ``4096``.

One convention, SGLang's: binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones
(KB, MB, GB, TB) are powers of 1000 (SGLang's ``--hicache-size`` is in GB = 10^9 bytes). ``K`` /
``M`` / ``G`` / ``T`` alone are refused: half the tools read ``2G`` as 2 GiB, the other half as
2 GB, so the error names both spellings. ``B`` or no suffix is bytes. Suffixes are not
case-sensitive (``gib`` = ``GiB``). Anything else raises ``ValueError`` naming the bad text.
"""

from __future__ import annotations

import re

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "kb": 1000,
    "mib": 1 << 20,
    "mb": 1000**2,
    "gib": 1 << 30,
    "gb": 1000**3,
    "tib": 1 << 40,
    "tb": 1000**4,
}
_AMBIGUOUS = {"k", "m", "g", "t"}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
UNIT_RULE = "GiB/MiB/KiB/TiB are powers of 1024, GB/MB/KB/TB powers of 1000 (as SGLang's --hicache-size)"


def parse_size(value: int | float | str) -> int:
    """Return ``value`` in bytes; raise ``ValueError`` for negatives, unknown or ambiguous units, junk."""
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
    if unit.lower() in _AMBIGUOUS:
        letter = unit.upper()
        raise ValueError(
            f"invalid size {value!r}: {unit!r} alone is ambiguous; write {number}{letter}iB "
            f"(x {1 << (10 * ('KMGT'.index(letter) + 1))}) or {number}{letter}B "
            f"(x {1000 ** ('KMGT'.index(letter) + 1)}) ({UNIT_RULE})"
        )
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


def describe_size(num_bytes: int) -> str:
    """A size as ``config show`` prints it: the exact binary figure when there is one, else the
    decimal one (the shorter), then the bytes, e.g. ``2 GiB (2147483648 B)``, ``32 GB (32000000000 B)``,
    ``1.5 GiB (1610612736 B)``; below 1 KiB just ``512 B``."""
    if num_bytes < 1024:
        return f"{num_bytes} B"
    exact = [
        (num_bytes // base**power, unit)
        for base, units in ((1024, ("KiB", "MiB", "GiB", "TiB")), (1000, ("KB", "MB", "GB", "TB")))
        for power, unit in enumerate(units, start=1)
        if num_bytes % base**power == 0
    ]
    if exact:
        count, unit = min(exact)
        return f"{count} {unit} ({num_bytes} B)"
    return re.sub(r"(\d)([A-Za-z])", r"\1 \2", format_size(num_bytes)) + f" ({num_bytes} B)"
