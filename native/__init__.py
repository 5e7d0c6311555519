"""The native data plane: fingerprints, fingerprint tables, batch copies, checksums and I/O.

The mechanism that touches every byte and every key lives in the C extension ``_core`` (sources
in native/src); this package wraps it with typed numpy arrays. Python owns every buffer, the
native side borrows it for one call, and every call that does more than O(1) work releases the
GIL once for its whole batch. Bad arguments raise before any byte moves (ValueError naming the
item and the value, TypeError for a wrong type or dtype); per-item I/O results come back as
numbers, never as exceptions. See docs/native.md.

There is no pure-Python fallback: without the built extension this import fails with an
ImportError naming the fix. The package imports nothing else of ours (lowest layer).
"""

from __future__ import annotations

import os
from pathlib import Path

# A separately built _core (scripts/native_sanitize.sh: the AddressSanitizer + UBSan build) is
# found first when this names its directory; the Python modules stay the ones beside this file.
_CORE_DIR = os.environ.get("HICACHE_MOONCAKE_NATIVE_CORE_DIR")
if _CORE_DIR:
    __path__.insert(0, _CORE_DIR)

try:
    from . import _core  # noqa: F401 - the import is the check
except ImportError as exc:  # pragma: no cover - exercised by a broken install only
    _built = any(any(Path(d).glob("_core.*.so")) for d in __path__)
    raise ImportError(
        "hicache_mooncake.native._core (the C extension) "
        + (f"cannot be loaded ({exc})" if _built else "is not built")
        + ": build it with `pip install -e .` or `scripts/dev.sh setup` (needs gcc and the Python headers)"
    ) from exc

from ._source_hash import source_hash  # noqa: E402


def check_built_from_these_sources() -> None:
    """A checkout (``native/src`` beside this package: an editable install) whose C sources differ
    from those ``_core`` was built from is refused: the Python wrappers here follow the sources,
    so a stale build fails later in confusing ways (a method missing, an argument count wrong)."""
    built = getattr(_core, "SOURCE_HASH", "")
    here = source_hash(Path(__file__).resolve().parent / "src")
    if built and here and built != here:
        raise ImportError(
            "hicache_mooncake.native._core was built from other sources than native/src holds now "
            f"(built {built}, sources {here}): rebuild it with `pip install -e .` or `scripts/dev.sh setup` "
            "(`python setup.py build_ext --inplace --force` where the sources are older than the build)"
        )


check_built_from_these_sources()

from ._xxh3_loader import SYSTEM_LIBRARY, SYSTEM_SYMBOL, load_xxh3, set_xxh3_library  # noqa: E402

XXH3_SOURCE: tuple[str, str] = load_xxh3()
"""(library path, symbol) xxh3 is computed with: python-xxhash's dispatch or the system lib."""

from .checksums import xxh3_64, xxh3_batch  # noqa: E402
from .copies import copy_pages, view_spans  # noqa: E402
from .fingerprints import fingerprint, fingerprints, key_hashes, set_test_fingerprint_mask  # noqa: E402
from .fptable import FpTable  # noqa: E402
from .io import (  # noqa: E402
    EntryVerdict,
    WritesInFlight,
    io_late_items,
    io_threads,
    pread_batch,
    pwrite_batch,
    read_entries,
    reserve_io_staging,
    set_io_threads,
    write_entries,
)
from .key_order import KeyOrder  # noqa: E402
from .page_keys import check_page_keys, join_keys  # noqa: E402
from .page_views import AffinePages  # noqa: E402
from .recency_log import RecencyLog  # noqa: E402
from .reuse_ledger import ReuseLedger  # noqa: E402
from .row_tuples import row_tuples  # noqa: E402
from .slab_allocator import SlabAllocator  # noqa: E402
from .slot_index import SlotIndex  # noqa: E402
from .slots import copy_slots, page_sizes  # noqa: E402
from .wire_keys import decode_keyed, encode_keyed  # noqa: E402

__all__ = [
    "SYSTEM_LIBRARY",
    "SYSTEM_SYMBOL",
    "XXH3_SOURCE",
    "EntryVerdict",
    "WritesInFlight",
    "FpTable",
    "KeyOrder",
    "RecencyLog",
    "ReuseLedger",
    "SlabAllocator",
    "SlotIndex",
    "copy_pages",
    "AffinePages",
    "check_page_keys",
    "copy_slots",
    "decode_keyed",
    "encode_keyed",
    "fingerprint",
    "fingerprints",
    "io_late_items",
    "io_threads",
    "join_keys",
    "key_hashes",
    "page_sizes",
    "pread_batch",
    "pwrite_batch",
    "read_entries",
    "reserve_io_staging",
    "row_tuples",
    "set_io_threads",
    "set_test_fingerprint_mask",
    "set_xxh3_library",
    "view_spans",
    "write_entries",
    "xxh3_64",
    "xxh3_batch",
]
