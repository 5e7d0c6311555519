"""Pages of one shape never answer a request of another: the key's namespace digest covers what
makes pages compatible (page size, heads, head dim, layers, dtype, layout), and a set into the
host cache that finds an entry of another size under the same key replaces it (True means stored,
and a read of the new size returns the new bytes)."""

from __future__ import annotations

import numpy as np
import pytest
from host_cache_procs import PrivateHostCache

from hicache_mooncake.config import validate_config
from hicache_mooncake.keys import RankInfo, build_keyspace
from hicache_mooncake.store_builder import build_client_store

BASE = {
    "layout": "page_first",
    "page_size": 64,
    "layer_num": 32,
    "head_num": 8,
    "head_dim": 128,
    "kv_lora_rank": None,
    "qk_rope_head_dim": None,
    "dtype": "torch.bfloat16",
    "bytes_per_token": 131072,
}


@pytest.mark.parametrize(
    "change",
    [
        {"page_size": 32},
        {"head_num": 4},
        {"head_dim": 64},
        {"layer_num": 16},
        {"dtype": "torch.float8_e4m3fn"},
        {"layout": "layer_first"},
    ],
)
def test_a_change_of_page_geometry_gives_other_keys(change: dict[str, object]) -> None:
    ranks = RankInfo()
    same = build_keyspace("m", "", dict(BASE), "v1", ranks)
    other = build_keyspace("m", "", {**BASE, **change}, "v1", ranks)
    assert same.key("h") == build_keyspace("m", "", dict(BASE), "v1", ranks).key("h")
    assert other.key("h") != same.key("h")


@pytest.mark.integration
def test_a_set_of_another_size_under_a_stale_key_replaces_it(host_cache: PrivateHostCache) -> None:
    config = validate_config(host_cache.extra(host_cache="on"))
    store = build_client_store(config, "rank0", True)
    try:
        old = np.full(8192, 7, dtype=np.uint8)
        assert store.put_batch(["key1"], [[memoryview(old)]]) == [True]
        new = np.arange(4096, dtype=np.uint32).view(np.uint8)[:4096].copy()
        assert store.put_batch(["key1"], [[memoryview(new)]]) == [True]
        out = np.zeros(4096, dtype=np.uint8)
        assert store.get_batch_into(["key1"], [[memoryview(out)]]) == [True]
        assert bytes(out) == bytes(new)  # the new page, byte-exact
        stale = np.zeros(8192, dtype=np.uint8)
        assert store.get_batch_into(["key1"], [[memoryview(stale)]]) == [False]  # the old one is gone
    finally:
        store.close()
