"""Driving storage backends the way SGLang's cache controller does, for the benchmarks
(underscore: a helper, not a ``bench`` target)."""

from __future__ import annotations

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
