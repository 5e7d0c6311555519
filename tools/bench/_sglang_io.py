"""Driving storage backends the way SGLang's cache controller does, for the benchmarks
(underscore: a helper, not a ``bench`` target)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def create_backend(name: str, extra: dict[str, Any], host: Any, settle: bool = True) -> Any:
    """A storage backend made by SGLang's own factory, registered with the host pool. With
    ``settle`` (throughput benchmarks), ours also waits for the background huge-page check of the
    host pool and for the DRAM arena's background prefault, so the timed puts take the path they
    keep; ``bench scale`` times attach without them.

    With ``settle`` the objects made so far (SGLang's, torch's, the workload's: ~500k here) are
    then moved out of the collector's generations with ``gc.freeze()``, as SGLang's server does
    in every process once it has warmed up (``/freeze_gc``, posted by the server itself): left
    in, a full collection that happens to fall inside a timed call scans them all, 0.2-0.34 s
    here, one call of the round 2.5x slower, whichever backend runs."""
    import gc

    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.tools.sglang_harness import make_storage_config

    backend = StorageBackendFactory.create_backend(name, make_storage_config(extra), host)
    backend.register_mem_pool_host(host)
    store = getattr(backend, "store", None)
    ssd, dram = getattr(store, "ssd", None), getattr(store, "dram", None)
    if settle and ssd is not None:
        ssd.memory_checked(60)
    if settle and dram is not None and hasattr(dram, "wait_prefaulted"):
        dram.wait_prefaulted(600)
    if settle:  # what earlier legs left in cycles is collected first (frozen, it never would be)
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    return backend


def generic_set(backend: Any, host: Any, batches: list[list[str]], src: Any) -> None:
    """The controller's generic (non-v1) path: flat pages out of the host pool, ``batch_set``."""
    ps = host.page_size
    for keys in batches:
        values = [host.get_data_page(int(src[i * ps]), flat=True) for i in range(len(keys))]
        backend.batch_set(keys, values)


def generic_get(backend: Any, host: Any, batches: list[list[str]], dst: Any) -> int:
    """The controller's generic path: dummy flat pages in, then ``set_from_flat_data_page``.
    Returns the pages of the last batch that were served (the leading run)."""
    ps = host.page_size
    served = 0
    for keys in batches:
        pages = backend.batch_get(keys, [host.get_dummy_flat_data_page() for _ in keys])
        served = 0
        for i, page in enumerate(pages):
            if page is None:
                break
            host.set_from_flat_data_page(int(dst[i * ps]), page)
            served += 1
    return served


def timed_generic_set(
    backend: Any, host: Any, batches: list[list[str]], src: Any, stamps: PageStamps, tags: Any
) -> Timed:
    """:func:`generic_set` per batch, the source pages stamped before each call (untimed)."""
    import time

    out = Timed()
    for b, keys in enumerate(batches):
        stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
        c0, t0 = time.process_time(), time.perf_counter()
        generic_set(backend, host, [keys], src)
        out.seconds += time.perf_counter() - t0
        out.cpu_seconds += time.process_time() - c0
        out.ok_pages += len(keys)
    return out


def timed_generic_get(
    backend: Any, host: Any, batches: list[list[str]], src: Any, dst: Any, stamps: PageStamps, tags: Any
) -> Timed:
    """:func:`generic_get` per batch, every page read back checked (untimed)."""
    import time

    out = Timed()
    for b, keys in enumerate(batches):
        c0, t0 = time.process_time(), time.perf_counter()
        served = generic_get(backend, host, [keys], dst)
        out.seconds += time.perf_counter() - t0
        out.cpu_seconds += time.process_time() - c0
        out.ok_pages += served
        stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
        out.bad_pages += stamps.mismatches(src, dst, len(keys), [j < served for j in range(len(keys))])
    return out


def v1_batches(fn: Any, batches: list[list[str]], region: Any, page_size: int) -> None:
    """Zero-copy path: ``fn(keys, host_indices)`` per batch over one host region."""
    for keys in batches:
        fn(keys, region[: len(keys) * page_size])


# page bytes = 2 (K,V) * layers * 64 tokens * heads * 128 dim * 2 (bf16) = 32 KiB * layers * heads
PAGE_SHAPES = {
    64 << 10: (2, 1),
    128 << 10: (4, 1),
    256 << 10: (4, 2),
    1 << 20: (8, 4),
    4 << 20: (16, 8),
    8 << 20: (32, 8),
}


@dataclass
class PageWorkload:
    """A real SGLang host pool with a source region of random pages, a destination region, and
    ``pages`` keys in batches that fit the regions; ``extra`` holds more batch-sized regions
    (``extra_regions``), e.g. one per concurrent thread."""

    host: Any
    src: Any
    dst: Any
    keys: list[str]
    batches: list[list[str]]
    batch: int
    pages: int
    extra: list[Any] = field(default_factory=list)


def page_workload(
    page_bytes: int, total: int, batch_max: int = 128, batch_bytes: int = 256 << 20, extra_regions: int = 0
) -> PageWorkload:
    from hicache_mooncake.tools.sglang_harness import PoolShape, fill_random_pages, make_host_pool

    layers, heads = PAGE_SHAPES[page_bytes]
    batch = max(1, min(batch_max, batch_bytes // page_bytes))
    pages = max(batch, total // page_bytes)
    regions = 2 + extra_regions
    shape = PoolShape(
        page_size=64, layers=layers, heads=heads, head_dim=128, device_tokens=batch * 64 * -(-regions // 2)
    )
    assert shape.page_bytes() == page_bytes
    host = make_host_pool("page_first", False, shape)
    src = host.alloc(batch * 64)
    dst = host.alloc(batch * 64)
    extra = [host.alloc(batch * 64) for _ in range(extra_regions)]
    fill_random_pages(host, src, seed=1)
    # first touch of the destination pages, outside any timing
    for seed, region in enumerate([dst, *extra], start=2):
        fill_random_pages(host, region, seed=seed)
    keys = [f"{i:064x}" for i in range(pages)]
    return PageWorkload(
        host, src, dst, keys, [keys[i : i + batch] for i in range(0, pages, batch)], batch, pages, extra
    )


class PageStamps:
    """Distinct bytes in every page of every batch, and a check of every page read back.

    ``stamp(region, tags)`` writes 16 bytes (the page's tag and the part's index) at the start of
    each part of page ``i`` of ``region`` (a host-index tensor, ``page_size`` tokens per page), so
    the pages of a batch differ from each other and from every other batch: a get that returns
    another page's bytes, or another part's, or nothing at all, fails ``mismatches``. Both run
    outside the timed region of the benchmarks."""

    def __init__(self, host: Any) -> None:
        from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews, pool_tensors

        self.host = host
        self._map = HostPoolViews(pool_tensors(host))
        self._parts: dict[tuple[int, int], list[list[Any]]] = {}

    def parts(self, region: Any, pages: int) -> list[list[Any]]:
        """uint8 arrays over the parts of the first ``pages`` pages of ``region`` (cached)."""
        import numpy as np

        ps = self.host.page_size
        key = (int(region[0]), pages)
        if key not in self._parts:
            ptrs, sizes = self.host.get_page_buffer_meta(region[: pages * ps])
            views = self._map.page_parts(ptrs, sizes, pages)
            self._parts[key] = [[np.frombuffer(v, dtype=np.uint8) for v in page] for page in views]
        return self._parts[key]

    def views(self, region: Any, pages: int) -> list[memoryview]:
        """The parts of the first ``pages`` pages of ``region`` as byte views into the pool's
        buffers, in order, one flat list (what ``parts`` wraps)."""
        return [part.base for page in self.parts(region, pages) for part in page]

    def stamp(self, region: Any, tags: list[int]) -> None:
        import numpy as np

        for page, tag in zip(self.parts(region, len(tags)), tags, strict=True):
            for j, part in enumerate(page):
                part[:16] = np.frombuffer(int(tag).to_bytes(8, "little") + j.to_bytes(8, "little"), np.uint8)

    def mismatches(self, expected: Any, got: Any, pages: int, served: list[bool] | None = None) -> int:
        """Pages among the first ``pages`` (those ``served``, if given) whose bytes in ``got``
        differ from ``expected``."""
        import numpy as np

        bad = 0
        for i, (want, have) in enumerate(
            zip(self.parts(expected, pages), self.parts(got, pages), strict=True)
        ):
            if served is not None and not served[i]:
                continue
            if not all(np.array_equal(a, b) for a, b in zip(want, have, strict=True)):
                bad += 1
        return bad

    def close(self) -> None:
        self._parts.clear()
        self._map.close()


@dataclass
class Timed:
    """Seconds spent inside the calls only (wall, and CPU of the whole process meanwhile), pages
    the calls reported done, pages whose bytes were wrong (gets: every served page is checked)."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    ok_pages: int = 0
    bad_pages: int = 0


def timed_v1_set(
    fn: Any, batches: list[list[str]], src: Any, stamps: PageStamps, tags: Any, page_size: int
) -> Timed:
    """``fn(keys, host_indices)`` (``batch_set_v1``) per batch; before each call (untimed) the
    source pages are stamped with ``tags(batch_index, page_index_in_batch)``."""
    import time

    out = Timed()
    for b, keys in enumerate(batches):
        stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
        c0, t0 = time.process_time(), time.perf_counter()
        res = fn(keys, src[: len(keys) * page_size])
        out.seconds += time.perf_counter() - t0
        out.cpu_seconds += time.process_time() - c0
        out.ok_pages += sum(bool(r) for r in res)
    return out


def timed_v1_get(
    fn: Any,
    batches: list[list[str]],
    src: Any,
    dst: Any,
    stamps: PageStamps,
    tags: Any,
    page_size: int,
) -> Timed:
    """``fn(keys, host_indices)`` (``batch_get_v1``) per batch into ``dst``; after each call
    (untimed) ``src`` is stamped as it was for the set of that batch and every served page of
    ``dst`` is compared with it."""
    import time

    out = Timed()
    for b, keys in enumerate(batches):
        c0, t0 = time.process_time(), time.perf_counter()
        res = [bool(r) for r in fn(keys, dst[: len(keys) * page_size])]
        out.seconds += time.perf_counter() - t0
        out.cpu_seconds += time.process_time() - c0
        out.ok_pages += sum(res)
        stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
        out.bad_pages += stamps.mismatches(src, dst, len(keys), res)
    return out
