"""The DRAM tier's index as it was before the native table, in Python dicts: the reference model
the native index is held to (``test_dram_native_index``). It models what a user of the tier sees:
which keys are stored, with which bytes, and which sets a fingerprint collision refuses.

``fingerprint`` is the same function the tier uses (``hicache_mooncake.native.fingerprint``, with
the test-only mask when a test sets one): a set whose fingerprint another stored key holds is
refused (False); a set of a stored key is True and keeps the first bytes (values are immutable).
"""

from __future__ import annotations

from collections.abc import Callable


class ReferenceDramIndex:
    def __init__(self, fingerprint: Callable[[str], int]) -> None:
        self._fingerprint = fingerprint
        self._holder: dict[int, str] = {}  # fingerprint -> the key stored under it
        self._data: dict[str, bytes] = {}

    def put(self, key: str, value: bytes) -> bool:
        fp = self._fingerprint(key)
        holder = self._holder.get(fp)
        if holder is None:
            self._holder[fp] = key
            self._data[key] = value
            return True
        return holder == key

    def get(self, key: str, nbytes: int) -> bytes | None:
        value = self._data.get(key)
        return value if value is not None and len(value) == nbytes else None

    def contains(self, key: str) -> bool:
        return key in self._data

    def remove(self, key: str) -> bool:
        if self._data.pop(key, None) is None:
            return False
        del self._holder[self._fingerprint(key)]
        return True

    def clear(self) -> None:
        self._holder.clear()
        self._data.clear()

    def keys(self) -> set[str]:
        return set(self._data)
