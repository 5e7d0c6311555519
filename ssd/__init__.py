"""SSD engine: log-structured region files with checksums, recovery, reclaim and fsck.

Knows nothing of SGLang, tiers or transport. Public API: :class:`SsdOptions`,
:class:`SsdEngine`, :func:`fsck`, and the exceptions in :mod:`.errors`.
"""

from .engine import SsdEngine
from .errors import SsdCorruptionError, SsdDirectIoError, SsdError, SsdInUseError
from .options import SsdOptions

__all__ = [
    "SsdCorruptionError",
    "SsdDirectIoError",
    "SsdEngine",
    "SsdError",
    "SsdInUseError",
    "SsdOptions",
]
