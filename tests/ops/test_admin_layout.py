"""The layout report (``GET /v1/layout``) of a backend made by SGLang's own factory, and the lookup
API through that backend's key builder: the report keeps SGLang's L3-layout envelope and its key
rule (``key_prefix + page hash + suffix`` is the object key the data path writes: MHA with its rank
suffix, MLA without, head groups with ``tp_lcm_size``), states the page geometry, says why it is
disabled before SGLang registered its pools, and a lookup of the pages SGLang stored answers where
they are."""

from __future__ import annotations

import pytest
from admin_backend_helpers import PS, SHAPE, backend_of, extra, page_hashes, store_pages
from ops_helpers import TOKEN

from hicache_mooncake.admin.client import AdminClient

pytestmark = pytest.mark.sglang


def test_the_report_names_the_object_keys_the_data_path_writes(tmp_path):
    backend, host = backend_of(tmp_path)
    try:
        admin = AdminClient(backend.admin.url, TOKEN)
        report = admin.layout()
        layout = report["hicache_object_layout"]
        assert report["enabled"] is True and report["backend"] == "hicache-mooncake"
        assert report["page_size"] == PS and layout["is_mla_backend"] is False
        assert (layout["pp_rank"], layout["pp_size"]) == (0, 1)
        (kv,) = layout["pools"]
        assert kv["pool"] == "kv" and kv["hit_policy"] == "all_pages" and kv["suffixes"] == ["@tp0of1"]
        assert kv["page_bytes"] == SHAPE.page_bytes() and "MHA" in kv["object_kind"]
        assert kv["geometry"]["layout"] == "page_first" and kv["geometry"]["layer_num"] == SHAPE.layers
        assert kv["geometry"]["page_size"] == PS and "bfloat16" in kv["geometry"]["dtype"]
        assert report["key_format"]["version"] == "hm1" and report["key_format"]["rank_suffix"] == "@tp0of1"
        assert [t["name"] for t in report["tiers"]] == ["dram"] and report["tiers"][0]["lookup_without_io"]
        pages = page_hashes(3)
        store_pages(backend, host, pages)
        built = [layout["key_prefix"] + h + s for h in pages for s in kv["suffixes"]]
        assert backend.store.contains_batch(built) == [True] * 3
    finally:
        backend.close()


def test_mla_and_head_group_keys(tmp_path):
    backend, host = backend_of(tmp_path / "mla", mla=True)
    try:
        report = AdminClient(backend.admin.url, TOKEN).layout()
        (kv,) = report["hicache_object_layout"]["pools"]
        assert report["hicache_object_layout"]["is_mla_backend"] is True
        assert kv["suffixes"] == [""] and "MLA" in kv["object_kind"] and kv["replicated_across_tp"]
        assert kv["page_bytes"] == SHAPE.page_bytes(mla=True)
    finally:
        backend.close()
    backend, host = backend_of(tmp_path / "hg", tp_lcm_size=2)
    try:
        report = AdminClient(backend.admin.url, TOKEN).layout()
        (kv,) = report["hicache_object_layout"]["pools"]
        assert kv["suffixes"] == ["@hg0of2", "@hg1of2"] and kv["head_groups"] == 2
        pages = page_hashes(2)
        store_pages(backend, host, pages)
        prefix = report["hicache_object_layout"]["key_prefix"]
        built = [prefix + h + s for h in pages for s in kv["suffixes"]]
        assert backend.store.contains_batch(built) == [True] * 4
        answer = AdminClient(backend.admin.url, TOKEN).lookup([*pages, "f" * 64])
        assert answer["tiers"] == ["dram", "dram", None] and answer["longest_prefix"] == 2
    finally:
        backend.close()


def test_before_sglang_registers_its_pools_the_report_says_why(tmp_path):
    backend, host = backend_of(tmp_path, register=False)
    try:
        admin = AdminClient(backend.admin.url, TOKEN)
        report = admin.layout()
        assert report["enabled"] is False and "not registered" in report["reason"]
        assert report["hicache_object_layout"]["pools"] == []
        backend.register_mem_pool_host(host)
        backend.on_host_pools_registered()
        assert admin.layout()["enabled"] is True
        pages = page_hashes(4)
        store_pages(backend, host, pages[:3])
        answer = admin.lookup(pages)
        assert answer["tiers"] == ["dram", "dram", "dram", None] and answer["longest_prefix"] == 3
        assert backend.batch_exists(pages) == 3  # what SGLang's own existence call counts
    finally:
        backend.close()


def test_a_hybrid_models_sidecar_pool_is_reported_with_its_keys(tmp_path):
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.tools.sglang_harness import host_pool_for, make_device_pool, make_storage_config
    from hicache_mooncake.tools.sglang_hybrid import (
        host_group,
        make_mamba_device_pool,
        mamba_host_pool_for,
        register_group,
    )

    dev, mdev = make_device_pool(False, SHAPE), make_mamba_device_pool()
    group = host_group(
        [
            (PoolName.KV, host_pool_for(dev, "page_first", False, SHAPE), dev),
            (PoolName.MAMBA, mamba_host_pool_for(mdev, "page_first"), mdev),
        ]
    )
    cfg = make_storage_config(extra(tmp_path))
    backend = StorageBackendFactory.create_backend("dynamic", cfg, group.anchor_entry.host_pool)
    register_group(backend, group)
    try:
        report = AdminClient(backend.admin.url, TOKEN).layout()
        layout = report["hicache_object_layout"]
        kv, mamba = layout["pools"]
        assert (kv["pool"], mamba["pool"]) == ("kv", "mamba")
        assert mamba["hit_policy"] == "trailing_pages" and mamba["trailing_pages"] == 1
        assert "sidecar" in mamba["object_kind"] and mamba["page_bytes"] > 0
        (suffix,) = mamba["suffixes"]
        assert suffix.startswith(".mamba~") and suffix.endswith("@tp0of1")
        entry = backend.host_pools.get("mamba")
        assert entry.keys.key("h" * 64) == layout["key_prefix"] + "h" * 64 + suffix  # the key v2 sets use
    finally:
        backend.close()
