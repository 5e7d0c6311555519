"""One level up: UnifiedRadixCache.attach_storage_backend / detach_storage_backend, the calls the
scheduler makes for PUT/DELETE /hicache/storage-backend.

One shim, in this file only: SGLang's pool assembler builds the host pool with pin_memory=True,
which calls cudaHostRegister and fails without a CUDA driver. We make it build the SAME host-pool
class with pin_memory=False (``get_mha_host_pool_cls``); nothing else is patched.
"""

from __future__ import annotations

import functools
import json
import threading

import pytest
import yaml
from sglang_helpers import SMALL, small_extra, threads_started_since

from hicache_mooncake.tools.sglang_harness import make_device_pool

pytestmark = [pytest.mark.sglang, pytest.mark.integration]


@pytest.fixture()
def tree(sglang_runtime, monkeypatch):
    import torch.distributed as dist
    from sglang.srt.mem_cache import hybrid_cache
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as assembler
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    del hybrid_cache
    original = assembler.get_mha_host_pool_cls
    monkeypatch.setattr(
        assembler, "get_mha_host_pool_cls", lambda info: functools.partial(original(info), pin_memory=False)
    )
    s = SMALL
    dev = make_device_pool(False, s)
    alloc = PagedTokenToKVPoolAllocator(s.device_tokens, s.page_size, s.dtype, "cpu", dev, need_sort=False)
    r2t = ReqToTokenPool(size=8, max_context_len=256, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=r2t,
        token_to_kv_pool_allocator=alloc,
        page_size=s.page_size,
        tp_cache_group=dist.group.WORLD,
        tree_components=(ComponentType.FULL,),
    )
    cache = UnifiedRadixCache(params)
    cache.init_hicache(sglang_runtime, params)
    yield cache
    cache.detach_storage_backend()


def test_runtime_attach_detach_cycle_through_the_tree(tree, tmp_path):
    conf = tmp_path / "hicache.yaml"
    conf.write_text(yaml.safe_dump(small_extra()))
    threads_before = set(threading.enumerate())
    for i in range(3):
        # the HTTP body carries the extra config as a JSON string or as "@file.yaml"
        extra = json.dumps(small_extra()) if i % 2 else f"@{conf}"
        ok, msg = tree.attach_storage_backend("dynamic", extra, "org/tiny", "wait_complete", "write_through")
        assert ok, msg
        backend = tree.cache_controller.storage_backend
        assert type(backend).__name__ == "HiCacheMooncakeBackend"
        ok, msg = tree.attach_storage_backend("dynamic", extra, "org/tiny", "best_effort", None)
        assert ok and "updated" in msg  # same backend type: only policies change
        ok, msg = tree.attach_storage_backend("file", None, "org/tiny", None, None)
        assert not ok and "Detach first" in msg
        ok, msg = tree.detach_storage_backend()
        assert ok and tree.cache_controller.storage_backend is None and backend._closed
    ok, _ = tree.detach_storage_backend()
    assert ok  # idempotent
    assert threads_started_since(threads_before) == []


def test_bad_yaml_attach_is_refused_with_the_key_and_nothing_attached(tree):
    extra = small_extra()
    extra["tiers"]["policy"] = "nonexistent"
    ok, msg = tree.attach_storage_backend("dynamic", json.dumps(extra), "org/tiny", None, None)
    assert not ok
    assert "tiers.policy" in msg
    assert tree.cache_controller.storage_backend is None
    ok, msg = tree.attach_storage_backend("dynamic", json.dumps(small_extra()), "org/tiny", None, None)
    assert ok, msg


def test_clear_and_shutdown_detach(tree):
    ok, msg = tree.attach_storage_backend("dynamic", json.dumps(small_extra()), "org/tiny", None, None)
    assert ok, msg
    backend = tree.cache_controller.storage_backend
    assert tree.clear_storage_backend()
    tree.shutdown()  # the atexit path
    assert backend._closed and not tree.enable_storage
