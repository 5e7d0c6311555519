"""The admin endpoint of a backend made by SGLang's own factory: each rank serves it at its port
from one YAML, registers it for the CLI, applies operations to the store SGLang's calls use, and
stops with the backend. A call whose ``HiCacheStorageExtraInfo`` names a tenant stores that
tenant's pages (the tenant's stats, ``clear --tenant``)."""

from __future__ import annotations

import pytest
from sglang_helpers import SMALL, make_backend, small_extra
from transport_procs import free_port

from hicache_mooncake.admin.client import AdminClient, rank_endpoints
from hicache_mooncake.keys import tenant_of_key
from hicache_mooncake.sglang_harness import fill_random_pages, page_snapshot

pytestmark = pytest.mark.sglang
PS = SMALL.page_size
TOKEN = "t0k3n"


def keys(n: int, tag: str) -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


def admin_extra(tmp_path, port: int) -> dict:  # type: ignore[no-untyped-def]
    token = tmp_path / "token"
    token.write_text(TOKEN)
    extra = small_extra(ssd={"enabled": True, "path": str(tmp_path / "ssd"), "capacity": "16MiB",
                             "region_size": "1MiB", "min_free": 0, "direct_io": "off"})  # fmt: skip
    extra["admin"] = {"port": port, "token_file": str(token), "discovery_dir": str(tmp_path / "disc")}
    return extra


def test_each_rank_serves_its_endpoint_from_one_yaml(tmp_path):
    base = free_port()
    extra = admin_extra(tmp_path, base)
    backends = [make_backend(extra=extra, tp_rank=r, tp_size=2)[0] for r in range(2)]
    try:
        ranks = rank_endpoints(tmp_path / "disc")
        assert [e.url for e in ranks] == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
        assert [e.labels["rank"] for e in ranks] == ["0", "1"]
        for backend, endpoint in zip(backends, ranks, strict=True):
            shown = AdminClient(endpoint.url, TOKEN).show()
            assert [t["name"] for t in shown["tiers"]] == ["dram", "ssd"]
            assert backend.admin.url == endpoint.url
    finally:
        for backend in backends:
            backend.close()
    assert rank_endpoints(tmp_path / "disc") == []  # closing removed the registrations


def test_operations_apply_to_the_store_sglang_calls(tmp_path):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

    backend, host = make_backend(extra=admin_extra(tmp_path, 0))
    try:
        client = AdminClient(backend.admin.url, TOKEN)
        src = host.alloc(8 * PS)
        fill_random_pages(host, src, seed=5)
        want = page_snapshot(host, src)
        tenant = HiCacheStorageExtraInfo(extra_info={"tenant": "team-a"})
        assert backend.batch_set_v1(keys(8, "a"), src, tenant) == [True] * 8
        assert backend.batch_set_v1(keys(8, "d"), src) == [True] * 8
        assert {tenant_of_key(k) for k in backend.store.dram.keys()} == {"", "team-a"}
        assert backend.batch_exists(keys(8, "a")) == 0  # the default tenant does not see team-a's pages
        assert backend.batch_exists(keys(8, "a"), tenant) == 8
        tenants = client.show()["tenants"]
        assert tenants["team-a"]["set_stored_pages"] == 8 and tenants[""]["set_stored_pages"] == 8

        assert client.wait(client.clear("team-a"), 30)["complete"]
        assert backend.batch_exists(keys(8, "a"), tenant) == 0
        assert backend.batch_exists(keys(8, "d")) == 8
        dst = host.alloc(8 * PS)
        assert backend.batch_get_v1(keys(8, "d"), dst) == [True] * 8
        assert all(x.equal(y) for x, y in zip(want, page_snapshot(host, dst), strict=True))

        assert client.wait(client.detach("ssd", "drain"), 60)["complete"]
        assert [t.name for t in backend.store.tiers] == ["dram"]
        assert backend.batch_get_v1(keys(8, "d"), dst) == [True] * 8  # still served from DRAM
    finally:
        backend.close()
