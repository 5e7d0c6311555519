"""Our backend through SGLang's own factory, config class and host pools (no mocks of SGLang)."""

from __future__ import annotations

import logging
import threading

import pytest
import torch
import yaml
from sglang_helpers import DEFAULT_YAML, LAYOUTS, SMALL, make_backend, small_extra

from hicache_mooncake.config import ConfigError
from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = pytest.mark.sglang
PS = SMALL.page_size


def keys(n: int, start: int = 0, tag: str = "a") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(start, start + n)]


def test_factory_creates_backend_from_nothing_but_the_default_yaml():
    """The shipped preset as is (2 GiB DRAM, SSD under /var/tmp/hicache-mooncake/rank0_0_0_0)."""
    import shutil
    from pathlib import Path

    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.backend import HiCacheMooncakeBackend
    from hicache_mooncake.tools.sglang_harness import make_host_pool, make_storage_config

    extra = yaml.safe_load(DEFAULT_YAML.read_text())
    rank_dir = Path(extra["tiers"]["ssd"]["path"]) / "rank0_0_0_0"
    existed = rank_dir.exists()
    host = make_host_pool("page_first", False, SMALL)
    backend = StorageBackendFactory.create_backend("dynamic", make_storage_config(extra), host)
    try:
        assert isinstance(backend, HiCacheMooncakeBackend)
        assert [t.name for t in backend.store.tiers] == ["dram", "ssd"]
    finally:
        backend.close()
        if not existed:
            shutil.rmtree(rank_dir, ignore_errors=True)


def test_at_yaml_extra_config_goes_through_sglangs_own_parser(tmp_path):
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    f = tmp_path / "ours.yaml"
    f.write_text(yaml.safe_dump(small_extra()))
    extra, threshold, *_ = HybridCacheController.parse_storage_backend_extra_config(f"@{f}")
    backend, _host = make_backend(extra=extra)
    assert backend.config.tiers.dram.capacity == 32 << 20
    backend.close()


def test_bad_yaml_refuses_the_attach_with_the_key_named():
    extra = small_extra()
    extra["tiers"]["dram"]["capacity"] = "lots"
    with pytest.raises(ConfigError, match="tiers.dram.capacity"):
        make_backend(extra=extra)


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_v1_round_trip_is_byte_exact(layout, mla):
    backend, host = make_backend(layout, mla)
    src = host.alloc(6 * PS)
    fill_random_pages(host, src, seed=1)
    want = page_snapshot(host, src)
    ks = keys(6)
    assert backend.batch_set_v1(ks, src) == [True] * 6
    dst = host.alloc(6 * PS)
    assert backend.batch_get_v1(ks, dst) == [True] * 6
    got = page_snapshot(host, dst)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    backend.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_legacy_copy_path_round_trip(layout):
    extra = small_extra()
    extra["interface_v1"] = 0
    backend, host = make_backend(layout, extra=extra)
    src = host.alloc(3 * PS)
    fill_random_pages(host, src, seed=2)
    want = page_snapshot(host, src)
    values = [host.get_data_page(int(src[i * PS]), flat=True) for i in range(3)]  # as the controller does
    assert backend.batch_set(keys(3), values)
    got = backend.batch_get(keys(3) + keys(1, 99), [host.get_dummy_flat_data_page() for _ in range(4)])
    assert got[3] is None
    for page, expected in zip(got[:3], want, strict=True):
        assert torch.equal(page.contiguous().view(torch.uint8), expected)
    backend.close()


@pytest.mark.parametrize("ssd", [False, True], ids=["dram", "dram+ssd"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_kv_page_larger_than_a_slab_is_stored_in_chunks_and_read_back_whole(tmp_path, layout, ssd):
    """A KV page no local tier holds whole (a 70B model at TP1 with 256-token pages is 84 MB, above
    the default 64 MiB slab) is stored as chunks, as a sidecar page is: before, every such page
    was refused and the model had no L3 hit at all."""
    extra = small_extra(dram={"slab_size": "16KiB"})  # the 24 KiB KV page does not fit
    if ssd:
        extra["tiers"]["ssd"].update({"enabled": True, "path": str(tmp_path / "ssd"), "capacity": "16MiB",
                                      "region_size": "1MiB", "min_free": 0, "mode": "write_through"})  # fmt: skip
    backend, host = make_backend(layout, extra=extra)
    try:
        assert 16 << 10 < backend.host_pools.kv.page_nbytes <= 32 << 10
        src, dst = host.alloc(6 * PS), host.alloc(6 * PS)
        fill_random_pages(host, src, seed=7)
        fill_random_pages(host, dst, seed=8)
        want = page_snapshot(host, src)
        ks = keys(6, tag="c")
        assert backend.batch_set_v1(ks, src) == [True] * 6
        store_keys = backend._store_keys(ks)
        assert len(store_keys) == 12 and store_keys[1].endswith("#1of2")  # hints name every chunk
        assert all(backend.store.contains_batch(store_keys))
        assert backend.store.stats()["dram"]["entries"] == 12
        assert backend.batch_exists(ks) == 6
        assert backend.batch_get_v1(ks, dst) == [True] * 6
        assert all(torch.equal(a, b) for a, b in zip(want, page_snapshot(host, dst), strict=True))
        if ssd:
            assert backend.store.flush(30)
            assert backend.store.ssd.contains_batch(store_keys) == [True] * 12
        assert backend.store.remove(store_keys[7])  # one chunk of page 3 gone: pages 3.. are misses
        assert backend.batch_exists(ks) == 3
        assert backend.batch_get_v1(ks, dst) == [True] * 3 + [False] * 3
        assert backend.store.stats()["dram"]["entries"] == 11  # nothing else was displaced
    finally:
        backend.close()


def test_the_legacy_copy_path_stores_a_kv_page_larger_than_a_slab_in_chunks(caplog):
    extra = small_extra(dram={"slab_size": "16KiB"})
    extra["interface_v1"] = 0
    backend, host = make_backend(extra=extra)
    caplog.set_level(logging.INFO, logger="hicache_mooncake.backend")
    try:
        src = host.alloc(3 * PS)
        fill_random_pages(host, src, seed=9)
        want = page_snapshot(host, src)
        values = [host.get_data_page(int(src[i * PS]), flat=True) for i in range(3)]
        assert backend.batch_set(keys(3, tag="d"), values)
        assert backend.store.stats()["dram"]["entries"] == 6
        got = backend.batch_get(keys(3, tag="d"), [host.get_dummy_flat_data_page() for _ in range(3)])
        for page, expected in zip(got, want, strict=True):
            assert torch.equal(page.contiguous().view(torch.uint8), expected)
        told = [
            r.getMessage() for r in caplog.records if "each page is stored as 2 objects" in r.getMessage()
        ]
        assert len(told) == 1  # once, not per call
    finally:
        backend.close()


def test_batch_exists_counts_the_leading_run_only():
    backend, host = make_backend()
    idx = host.alloc(5 * PS)
    fill_random_pages(host, idx, seed=3)
    ks = keys(5)
    assert all(backend.batch_set_v1(ks[:3], idx[: 3 * PS]))
    assert all(backend.batch_set_v1(ks[4:], idx[4 * PS :]))
    assert backend.batch_exists(ks) == 3
    assert backend.batch_exists(ks[4:]) == 1
    assert backend.batch_exists(ks[3:]) == 0
    assert backend.exists(ks[0]) and not backend.exists(ks[3])
    dst = host.alloc(5 * PS)
    assert backend.batch_get_v1(ks, dst) == [True, True, True, False, False]
    backend.close()


def test_layouts_models_and_ranks_live_in_separate_namespaces():
    pf, _ = make_backend("page_first")
    lf, _ = make_backend("layer_first")
    other_model = small_extra()
    other_model["namespace"] = {"model": "someone/else"}
    om, _ = make_backend("page_first", extra=other_model)
    r1, _ = make_backend("page_first", tp_rank=1, tp_size=2)
    spaces = {b._keys.key("h") for b in (pf, lf, om, r1)}
    assert len(spaces) == 4
    mla0, _ = make_backend("page_first", mla=True, tp_rank=0, tp_size=2)
    mla1, _ = make_backend("page_first", mla=True, tp_rank=1, tp_size=2)
    assert mla0._keys.key("h") == mla1._keys.key("h")  # replicated KV: all ranks share one copy
    for b in (pf, lf, om, r1, mla0, mla1):
        b.close()


def test_mla_only_the_writer_rank_stores():
    writer, whost = make_backend("page_first", mla=True, tp_rank=0, tp_size=2)
    reader, rhost = make_backend("page_first", mla=True, tp_rank=1, tp_size=2)
    assert writer.is_storage_writer and not reader.is_storage_writer
    idx = rhost.alloc(2 * PS)
    assert reader.batch_set_v1(keys(2), idx) == [True, True]  # acknowledged, not stored
    assert reader.tier_stats()["tiers"]["dram"]["entries"] == 0
    widx = whost.alloc(2 * PS)
    fill_random_pages(whost, widx, seed=4)
    assert writer.batch_set_v1(keys(2), widx) == [True, True]
    assert writer.tier_stats()["tiers"]["dram"]["entries"] == 2
    writer.close()
    reader.close()


def test_pressure_evicts_and_survivors_stay_exact():
    extra = small_extra()
    extra["tiers"]["dram"].update({"capacity": "2MiB", "slab_size": "1MiB"})
    extra["tiers"]["policy"] = "lru"
    backend, host = make_backend(extra=extra)
    page_bytes = SMALL.page_bytes()
    stored: dict[str, torch.Tensor] = {}
    for round_ in range(30):
        idx = host.alloc(4 * PS)
        fill_random_pages(host, idx, seed=100 + round_)
        ks = keys(4, start=round_ * 4)
        assert all(backend.batch_set_v1(ks, idx))
        stored.update(zip(ks, page_snapshot(host, idx), strict=True))
        host.free(idx)
    tiers = backend.tier_stats()["tiers"]
    assert tiers["placement"]["dropped"] > 0
    assert tiers["dram"]["used_bytes"] <= 2 << 20
    present = [k for k in stored if backend.exists(k)]
    assert 0 < len(present) <= (2 << 20) // page_bytes
    dst = host.alloc(PS)
    for k in present:
        assert backend.batch_get_v1([k], dst) == [True]
        assert torch.equal(page_snapshot(host, dst)[0], stored[k])
    backend.close()


def test_four_threads_mixed_ops_are_byte_exact():
    backend, host = make_backend(extra=small_extra(dram={"capacity": "4MiB"}, policy="s3fifo"))
    errors: list[str] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        gen = torch.Generator().manual_seed(t)
        with lock:
            src = host.alloc(4 * PS)
            dst = host.alloc(4 * PS)
        for it in range(40):
            base = int(torch.randint(0, 30, (1,), generator=gen))
            ks = keys(4, start=base, tag="s")
            for i in range(4):  # page content is a function of its key alone
                fill_random_pages(host, src[i * PS : (i + 1) * PS], seed=base + i)
            want = page_snapshot(host, src)
            op = it % 3
            if op == 0:
                backend.batch_set_v1(ks, src)
            elif op == 1:
                hits = backend.batch_exists(ks)
                assert 0 <= hits <= 4
            else:
                ok = backend.batch_get_v1(ks, dst)
                got = page_snapshot(host, dst)
                for i, hit in enumerate(ok):
                    if hit and not torch.equal(got[i], want[i]):
                        errors.append(ks[i])

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors
    backend.close()


def test_failures_are_misses_not_exceptions():
    backend, host = make_backend()
    idx = host.alloc(PS)
    assert (
        backend.batch_set_v1(keys(129), host.alloc(129 * PS) if host.available_size() >= 129 * PS else idx)
        == [False] * 129
    )
    assert backend.batch_get_v1(["x" * 600], idx) == [False]  # malformed key
    assert backend.batch_exists(["x" * 600]) == 0
    backend.close()
    backend.close()  # idempotent
    assert backend.batch_set_v1(keys(1), idx) == [False]
    assert backend.batch_get_v1(keys(1), idx) == [False]
    assert backend.batch_exists(keys(1)) == 0
    assert backend.batch_set(keys(1), [host.get_dummy_flat_data_page()]) is False


def test_calls_before_registration_miss():
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.tools.sglang_harness import make_host_pool, make_storage_config

    host = make_host_pool("page_first", False, SMALL)
    backend = StorageBackendFactory.create_backend("dynamic", make_storage_config(small_extra()), host)
    assert backend.batch_exists(keys(1)) == 0
    assert backend.batch_set_v1(keys(1), host.alloc(PS)) == [False]
    backend.close()


def test_get_stats_returns_fresh_storage_metrics_and_drains():
    from sglang.srt.observability.metrics_collector import StorageMetrics

    backend, host = make_backend()
    idx = host.alloc(4 * PS)
    backend.batch_set_v1(keys(4), idx)
    backend.batch_get_v1(keys(4), host.alloc(4 * PS))
    stats = backend.get_stats()
    assert isinstance(stats, StorageMetrics)
    assert stats.backup_pgs == [4] and stats.prefetch_pgs == [4]
    assert stats.backup_bandwidth[0] > 0
    again = backend.get_stats()
    assert again.backup_pgs == [] and again is not stats
    backend.close()


def test_clear_drops_everything():
    backend, host = make_backend()
    idx = host.alloc(2 * PS)
    backend.batch_set_v1(keys(2), idx)
    backend.clear()
    assert backend.batch_exists(keys(2)) == 0
    backend.close()


def test_prometheus_endpoint_serves_tier_gauges():
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    extra = small_extra()
    extra["metrics"] = {"port": 0}
    backend, host = make_backend(extra=extra)
    backend.batch_set_v1(keys(2), host.alloc(2 * PS))
    body = (
        urllib.request.urlopen(f"http://127.0.0.1:{backend.metrics_port}/metrics", timeout=5).read().decode()
    )
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    rank = (("model", "org/demo-model"), ("rank", "0"))
    assert found[("hicache_mooncake:tier_entries", (*rank, ("tier", "dram")))] == 2
    assert found[("hicache_mooncake:pages_total", (rank[0], ("op", "set"), rank[1], ("result", "ok")))] == 2
    backend.close()
