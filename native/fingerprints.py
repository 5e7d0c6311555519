"""Key fingerprints: the 64-bit identity every native table is keyed by.

``fingerprint(key)`` is xxh3_64 (seed 0) of the key's UTF-8 bytes, with 0 mapped to 1 (0 marks
an empty slot), so it is never 0. Two keys may share a fingerprint: whoever stores the full key
(the SSD entry header, the DRAM object header) checks it on read, so a collision is a miss.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _core
from ._arrays import U64, U64Array


def fingerprint(key: str | bytes) -> int:
    """The fingerprint of one key (TypeError for anything but str or bytes)."""
    return _core.fingerprint(key)


def fingerprints(keys: Sequence[str | bytes]) -> U64Array:
    """The fingerprints of a batch of keys in one native call (the GIL released once)."""
    out = np.empty(len(keys), dtype=U64)
    _core.fingerprints(keys, out)
    return out


def key_hashes(keys: Sequence[str | bytes]) -> U64Array:
    """xxh3_64 (seed 0) of each key's UTF-8 bytes as it is, in one native call: what object
    headers carry to be checked against the key (``transport.object_header.key_hash`` of each).
    Unlike a fingerprint it is never masked (``set_test_fingerprint_mask``) and 0 stays 0."""
    out = np.empty(len(keys), dtype=U64)
    _core.key_hashes(keys, out)
    return out


def set_test_fingerprint_mask(mask: int) -> None:
    """TEST-ONLY: AND every later fingerprint with ``mask`` (then 0 -> 1) to force collisions.

    Process-global; ``0`` turns it off. Tests set it in a fixture that resets it.
    """
    _core.set_test_fingerprint_mask(mask)
