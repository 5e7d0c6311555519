"""SGLang's own fault injector around our backend, driven by SGLang's real HybridCacheController
(backup and prefetch threads) for 20 s (``HICACHE_FAULT_SECONDS`` sets a longer soak; 20 s make
~700 requests here): random delays and failures on every storage call
(``SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY`` / ``..._FAILURE``, wrapped by SGLang's factory),
a DRAM tier small enough that pages keep moving to the SSD tier and back. Every page that a
prefetch loads is byte-checked against the page SGLang backed up under that hash."""

from __future__ import annotations

import os
import random
import time

import pytest
import torch
from sglang_helpers import SMALL, small_extra

from hicache_mooncake.tools.sglang_harness import (
    fill_random_pages,
    host_pool_for,
    make_device_pool,
    page_snapshot,
)
from hicache_mooncake.tools.sglang_hybrid import cache_controller, host_group

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size
DURATION_S = float(os.environ.get("HICACHE_FAULT_SECONDS", "20"))
DOCS, DOC_PAGES = 24, 12


@pytest.fixture()
def injected_controller(sglang_runtime, tmp_path, monkeypatch):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageFailureInjector, PoolName

    monkeypatch.setenv("SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY", "0.02")
    monkeypatch.setenv("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE", "0.1")
    s = SMALL
    dev = make_device_pool(False, s)
    host = host_pool_for(dev, "page_first_direct", False, s)
    group = host_group([(PoolName.KV, host, dev)])
    ctl = cache_controller(dev, group, s)
    extra = small_extra(
        dram={"capacity": "1MiB", "slab_size": "1MiB"},
        ssd={
            "enabled": True,
            "path": str(tmp_path),
            "capacity": "16MiB",
            "region_size": "1MiB",
            "min_free": 0,
        },
    )
    extra["hicache_storage_pass_prefix_keys"] = True
    ctl.attach_storage_backend(
        "dynamic",
        prefetch_threshold=PS,
        model_name="org/tiny",
        storage_backend_extra_config=extra,
        host_pools=group.entries,
    )
    assert isinstance(ctl.storage_backend, HiCacheStorageFailureInjector)
    yield ctl, host
    ctl.detach_storage_backend()


def _wait_prefetch(ctl, op, deadline: float) -> int:
    """The scheduler's side of a prefetch: the tokens loaded into op.host_indices (the last
    progress ACK before the one that completes the request)."""
    loaded = 0
    while True:
        ack = ctl.ack_prefetch_queue.get(timeout=max(0.1, deadline - time.monotonic()))
        assert ack.operation is op
        if ack.completed_tokens is not None:
            loaded = int(ack.completed_tokens)
        if ack.completed_req:
            return loaded


def test_injected_delays_and_failures_serve_no_wrong_byte(injected_controller):
    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
    from sglang.srt.mem_cache.utils import get_hash_str

    ctl, host = injected_controller
    rng = random.Random(7)
    docs = [[rng.randrange(1, 50_000) for _ in range(DOC_PAGES * PS)] for _ in range(DOCS)]
    expected: dict[str, torch.Tensor] = {}  # page hash -> the bytes SGLang backed up under it
    counts = {"requests": 0, "hit_pages": 0, "checked_pages": 0, "backed_up": 0, "partial_backups": 0}
    get_hash_str(docs[0][:PS], None)  # SGLang builds its hashing extension on first use
    end = time.monotonic() + DURATION_S
    while time.monotonic() < end:
        doc = docs[rng.randrange(DOCS)]
        n = rng.randrange(1, DOC_PAGES + 1)
        tokens = doc[: n * PS]
        hashes, prior = [], None
        for i in range(n):  # SGLang's own page hash chain
            prior = get_hash_str(tokens[i * PS : (i + 1) * PS], prior)
            hashes.append(prior)
        counts["requests"] += 1
        deadline = time.monotonic() + 60
        op = ctl.prefetch(
            CacheRequestHandle(rid=f"r{counts['requests']}", attempt_id=0), tokens, last_hash=None
        )
        hit = ctl.prefetch_hit_queue.get(timeout=60)
        assert hit is op
        loaded = 0
        if hit.storage_hit_count >= PS:
            dst = ctl.alloc_prefetch_host_buffers(hit, hit.storage_hit_count)
            assert dst is not None
            hit.host_indices = dst
            ctl.prefetch_buffer.put(hit)
            loaded = _wait_prefetch(ctl, hit, deadline) // PS
            got = page_snapshot(host, dst[: loaded * PS]) if loaded else []
            for h, page in zip(hashes[:loaded], got, strict=True):
                assert h in expected, "a page was served that was never backed up"
                assert torch.equal(page, expected[h]), f"wrong bytes for page {h}"
            counts["hit_pages"] += loaded
            counts["checked_pages"] += len(got)
            host.free(dst)
        todo = hashes[loaded:]
        if todo:
            src = host.alloc(len(todo) * PS)
            for i, h in enumerate(todo):  # a page's bytes are a function of its hash
                fill_random_pages(host, src[i * PS : (i + 1) * PS], seed=int(h[:8], 16))
            snap = page_snapshot(host, src)
            ctl.write_storage(src, tokens[loaded * PS :], hash_value=todo, prefix_keys=hashes[:loaded])
            done = ctl.ack_backup_queue.get(timeout=60)
            stored = done.completed_tokens // PS
            counts["backed_up"] += stored
            counts["partial_backups"] += stored < len(todo)
            for h, page in zip(todo, snap, strict=True):
                expected.setdefault(h, page)
            host.free(src)
        assert ctl.backup_thread.is_alive() and ctl.prefetch_thread.is_alive()
    backend = ctl.storage_backend._backend
    stats = backend.tier_stats()
    assert counts["requests"] > 50 and counts["checked_pages"] > 100, counts
    assert counts["partial_backups"] > 0, "the injector never failed a backup: the test tested nothing"
    assert stats["tiers"]["ssd"]["background"]["demoted"] > 0, "pages never moved to the SSD tier"
    print(counts, {k: stats["tiers"]["placement"].get(k) for k in ("promotions", "demotions", "dropped")})
