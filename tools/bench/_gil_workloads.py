"""The storage calls ``bench gil`` drives (underscore: a helper, not a target): each backend is
called the way SGLang's cache controller calls it, from one backup thread (sets of pages leaving
the GPU, new keys every batch) and prefetch threads (gets of stored pages into each thread's own
part of SGLang's host pool).

- ``HostPoolWorkers``: a backend made by SGLang's own factory on SGLang's real host pool: ours
  through ``batch_set_v1`` / ``batch_get_v1`` (zero copy, host indices), SGLang's ``file`` backend
  (``HiCacheFile``) through ``batch_set`` / ``batch_get`` of flat pages (it has no v1 calls);
- ``MooncakeWorkers``: Mooncake Store's Python client, ``batch_put_from`` / ``batch_get_into`` on
  registered buffers (every byte through its Transfer Engine to a segment in another process).

The stored pages are stamped before they are set and read back and compared once after the timed
phases (``verify``), outside every timed window: a figure of a backend that served wrong bytes
says so (``bad_pages``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

PAGE_TOKENS = 64  # tokens per page of the host pools made by ``_sglang_io.page_workload``


def _stored_key(i: int) -> str:
    return f"s{i:063x}"


def _backup_key(n: int, j: int) -> str:
    return f"b{n:031x}{j:032x}"


class HostPoolWorkers:
    """``backend`` on SGLang's host pool ``host``: ``regions[0]`` is the backup thread's source,
    ``regions[1 + t]`` prefetch thread ``t``'s destination (each ``batch_pages`` pages)."""

    def __init__(
        self, backend: Any, host: Any, regions: list[Any], page_bytes: int, batch_pages: int,
        stored_batches: int, v1: bool,
    ) -> None:  # fmt: skip
        self.backend, self.host, self.regions, self.v1 = backend, host, regions, v1
        self.page_bytes, self.batch_pages, self.stored_batches = page_bytes, batch_pages, stored_batches
        self.stored = [
            [_stored_key(b * batch_pages + j) for j in range(batch_pages)] for b in range(stored_batches)
        ]

    def _set(self, keys: list[str], region: Any) -> int:
        if self.v1:
            return sum(bool(r) for r in self.backend.batch_set_v1(keys, region[: len(keys) * PAGE_TOKENS]))
        values = [self.host.get_data_page(int(region[i * PAGE_TOKENS]), flat=True) for i in range(len(keys))]
        return len(keys) if self.backend.batch_set(keys, values) else 0

    def _get(self, keys: list[str], region: Any) -> list[bool]:
        if self.v1:
            return [bool(r) for r in self.backend.batch_get_v1(keys, region[: len(keys) * PAGE_TOKENS])]
        pages = self.backend.batch_get(keys, [self.host.get_dummy_flat_data_page() for _ in keys])
        served = []
        for i, page in enumerate(pages):
            if page is None:
                served.append(False)
                continue
            self.host.set_from_flat_data_page(int(region[i * PAGE_TOKENS]), page)
            served.append(True)
        return served

    def store(self, stamps: Any) -> int:
        """Set the stored pages (stamped), untimed; returns the pages stored."""
        ok = 0
        for b, keys in enumerate(self.stored):
            stamps.stamp(self.regions[0], [_tag(b, j) for j in range(len(keys))])
            ok += self._set(keys, self.regions[0])
        return ok

    def backup(self, n: int) -> int:
        return self._set([_backup_key(n, j) for j in range(self.batch_pages)], self.regions[0])

    def prefetch(self, thread: int, n: int) -> int:
        return sum(self._get(self.stored[n % self.stored_batches], self.regions[1 + thread]))

    def verify(self, stamps: Any) -> tuple[int, int]:
        """(pages served, pages whose bytes differ from their stamp) over one get of every stored page."""
        served = bad = 0
        src, dst = self.regions[0], self.regions[1]
        for b, keys in enumerate(self.stored):
            got = self._get(keys, dst)
            stamps.stamp(src, [_tag(b, j) for j in range(len(keys))])
            served += sum(got)
            bad += stamps.mismatches(src, dst, len(keys), got)
        return served, bad


def _tag(b: int, j: int) -> int:
    return 0x6711 << 40 | b << 16 | j


class MooncakeWorkers:
    """Mooncake Store's client ``store`` (set up, connected): one registered source buffer and one
    registered destination per prefetch thread."""

    def __init__(
        self, store: Any, page_bytes: int, batch_pages: int, stored_batches: int, prefetch_threads: int = 2
    ) -> None:
        self.store, self.page_bytes, self.batch_pages = store, page_bytes, batch_pages
        self.stored_batches = stored_batches
        nbuf = batch_pages * page_bytes
        self.src = np.frombuffer(np.random.default_rng(7).bytes(nbuf), dtype=np.uint8).copy()
        self.dst = [np.zeros(nbuf, dtype=np.uint8) for _ in range(prefetch_threads)]
        self.registered: list[int] = []
        for arr in (self.src, *self.dst):
            rc = store.register_buffer(arr.ctypes.data, nbuf)
            if rc != 0:
                raise RuntimeError(f"Mooncake register_buffer returned {rc}")
            self.registered.append(arr.ctypes.data)
        self.stored = [
            [f"mc-{_stored_key(b * batch_pages + j)}" for j in range(batch_pages)]
            for b in range(stored_batches)
        ]

    def _ptrs(self, arr: np.ndarray, n: int) -> list[int]:
        return [arr.ctypes.data + j * self.page_bytes for j in range(n)]

    def _put(self, keys: list[str]) -> int:
        rcs = self.store.batch_put_from(keys, self._ptrs(self.src, len(keys)), [self.page_bytes] * len(keys))
        return sum(rc == 0 for rc in rcs)

    def _get(self, keys: list[str], arr: np.ndarray) -> list[bool]:
        got = self.store.batch_get_into(keys, self._ptrs(arr, len(keys)), [self.page_bytes] * len(keys))
        return [n == self.page_bytes for n in got]

    def _stamp(self, b: int) -> None:
        for j in range(self.batch_pages):
            self.src[j * self.page_bytes : j * self.page_bytes + 8] = np.frombuffer(
                _tag(b, j).to_bytes(8, "little"), np.uint8
            )

    def store_all(self) -> int:
        ok = 0
        for b, keys in enumerate(self.stored):
            self._stamp(b)
            ok += self._put(keys)
        return ok

    def backup(self, n: int) -> int:
        return self._put([f"mc-{_backup_key(n, j)}" for j in range(self.batch_pages)])

    def prefetch(self, thread: int, n: int) -> int:
        return sum(self._get(self.stored[n % self.stored_batches], self.dst[thread]))

    def verify(self) -> tuple[int, int]:
        served = bad = 0
        dst, page = self.dst[0], self.page_bytes
        for b, keys in enumerate(self.stored):
            got = self._get(keys, dst)
            self._stamp(b)
            served += sum(got)
            bad += sum(
                1
                for j, ok in enumerate(got)
                if ok
                and not np.array_equal(dst[j * page : (j + 1) * page], self.src[j * page : (j + 1) * page])
            )
        return served, bad

    def close(self) -> None:
        for ptr in self.registered:
            with contextlib.suppress(Exception):  # the store is closed next anyway
                self.store.unregister_buffer(ptr)
        self.registered = []
