"""Driving storage backends the way SGLang's cache controller does, for the benchmarks
(underscore: a helper, not a ``bench`` target)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def create_backend(name: str, extra: dict[str, Any], host: Any) -> Any:
    """A storage backend made by SGLang's own factory, registered with the host pool."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.sglang_harness import make_storage_config

    backend = StorageBackendFactory.create_backend(name, make_storage_config(extra), host)
    backend.register_mem_pool_host(host)
    return backend


def generic_set(backend: Any, host: Any, batches: list[list[str]], src: Any) -> None:
    """The controller's generic (non-v1) path: flat pages out of the host pool, ``batch_set``."""
    ps = host.page_size
    for keys in batches:
        values = [host.get_data_page(int(src[i * ps]), flat=True) for i in range(len(keys))]
        backend.batch_set(keys, values)


def generic_get(backend: Any, host: Any, batches: list[list[str]], dst: Any) -> None:
    """The controller's generic path: dummy flat pages in, then ``set_from_flat_data_page``."""
    ps = host.page_size
    for keys in batches:
        pages = backend.batch_get(keys, [host.get_dummy_flat_data_page() for _ in keys])
        for i, page in enumerate(pages):
            if page is None:
                break
            host.set_from_flat_data_page(int(dst[i * ps]), page)


def v1_batches(fn: Any, batches: list[list[str]], region: Any, page_size: int) -> None:
    """Zero-copy path: ``fn(keys, host_indices)`` per batch over one host region."""
    for keys in batches:
        fn(keys, region[: len(keys) * page_size])


# page bytes = 2 (K,V) * layers * 64 tokens * heads * 128 dim * 2 (bf16) = 32 KiB * layers * heads
PAGE_SHAPES = {
    64 << 10: (1, 2),
    128 << 10: (2, 2),
    256 << 10: (4, 2),
    1 << 20: (8, 4),
    4 << 20: (16, 8),
    8 << 20: (32, 8),
}


@dataclass
class PageWorkload:
    """A real SGLang host pool with a source region of random pages, a destination region, and
    ``pages`` keys in batches that fit the regions."""

    host: Any
    src: Any
    dst: Any
    keys: list[str]
    batches: list[list[str]]
    batch: int
    pages: int


def page_workload(
    page_bytes: int, total: int, batch_max: int = 128, batch_bytes: int = 256 << 20
) -> PageWorkload:
    from hicache_mooncake.sglang_harness import PoolShape, fill_random_pages, make_host_pool

    layers, heads = PAGE_SHAPES[page_bytes]
    batch = max(1, min(batch_max, batch_bytes // page_bytes))
    pages = max(batch, total // page_bytes)
    shape = PoolShape(page_size=64, layers=layers, heads=heads, head_dim=128, device_tokens=batch * 64)
    assert shape.page_bytes() == page_bytes
    host = make_host_pool("page_first", False, shape)
    src = host.alloc(batch * 64)
    dst = host.alloc(batch * 64)
    fill_random_pages(host, src, seed=1)
    fill_random_pages(host, dst, seed=2)  # first touch of the destination pages, outside any timing
    keys = [f"{i:064x}" for i in range(pages)]
    return PageWorkload(
        host, src, dst, keys, [keys[i : i + batch] for i in range(0, pages, batch)], batch, pages
    )
