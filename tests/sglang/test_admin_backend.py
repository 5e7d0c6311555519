"""The admin endpoint of a backend made by SGLang's own factory: each rank serves it at its port
from one YAML, registers it for the CLI, applies operations to the store SGLang's calls use, and
stops with the backend. A call whose ``HiCacheStorageExtraInfo`` names a tenant stores that
tenant's pages (the tenant's stats, ``clear --tenant``). Hints sent by ``hicache-mooncake admin
hint`` name SGLang's page hashes and reach the keys each rank stores them under (refused before
SGLang registered its host pools)."""

from __future__ import annotations

import pytest
from sglang_helpers import SMALL, make_backend, small_extra
from transport_procs import free_port

from hicache_mooncake.admin.client import AdminClient, rank_endpoints
from hicache_mooncake.keys import tenant_of_key
from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

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


def test_hints_from_the_cli_reach_the_keys_each_rank_stores(tmp_path, capsys):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.cli import main
    from hicache_mooncake.tools.sglang_harness import make_host_pool, make_storage_config

    extra = admin_extra(tmp_path, free_port())
    made = []
    for rank in range(2):  # two TP ranks from one YAML, before SGLang registered its host pools
        host = make_host_pool(shape=SMALL)
        cfg = make_storage_config(extra, is_mla=False, layout="page_first", tp_rank=rank, tp_size=2)
        made.append((StorageBackendFactory.create_backend("dynamic", cfg, host), host))
    admin = ["admin", "--discovery-dir", str(tmp_path / "disc"), "--token-file", str(tmp_path / "token")]
    hashes = keys(8, "h")
    team = keys(4, "t")
    try:
        assert main([*admin, "hint", "pin", *hashes[:4], "--ttl", "600"]) == 1
        out = capsys.readouterr().out
        assert out.count("refused: SGLang has not registered its host pools") == 2
        assert all(b.store.hints.stats()["keys_pinned"] == 0 for b, _ in made)

        tenant = HiCacheStorageExtraInfo(extra_info={"tenant": "team-a"})
        for backend, host in made:
            backend.register_mem_pool_host(host)
            backend.on_host_pools_registered()
            src = host.alloc(8 * PS)
            fill_random_pages(host, src, seed=1)
            assert backend.batch_set_v1(hashes, src) == [True] * 8
            assert backend.batch_set_v1(team, src[: 4 * PS], tenant) == [True] * 4
            host.free(src)
        listing = tmp_path / "team.txt"
        listing.write_text("# the team's system prompt\n" + "\n".join(team) + "\n\n")
        assert main([*admin, "hint", "pin", *hashes[:4], "--ttl", "600"]) == 0
        assert capsys.readouterr().out.count("pin 4 pages for 600s") == 2
        assert main([*admin, "hint", "pin", "--file", str(listing), "--tenant", "team-a", "--ttl", "60"]) == 0
        assert main([*admin, "hint", "session-close", "conv-9", *hashes[4:6]]) == 0
        capsys.readouterr()
        for rank, (backend, _host) in enumerate(made):
            stored = list(backend.store.dram.keys())  # the keys this rank's store holds
            assert len(stored) == 12 and all(f"@tp{rank}of2" in k for k in stored)

            def key_of(h: str, stored: list[str] = stored) -> str:
                (key,) = [k for k in stored if f"/{h}@" in k]
                return key

            hints = backend.store.hints
            assert [hints.pinned(key_of(h)) for h in hashes] == [True] * 4 + [False] * 4
            assert all(hints.pinned(key_of(h)) and tenant_of_key(key_of(h)) == "team-a" for h in team)
            assert [hints.state(key_of(h)) for h in hashes[4:]] == [2, 2, 0, 0]  # UNLIKELY: closed

        assert main([*admin, "hint", "unpin", *hashes[:4]]) == 0
        assert main([*admin, "hint", "show"]) == 0
        out = capsys.readouterr().out
        assert out.count(": hints; pinned 4, shared 0, in sessions 2, sessions open 0 closed 1") == 2, out
        assert main([*admin, "hint", "unpin"]) == 2  # no hash named
        assert "name at least one page hash" in capsys.readouterr().err
    finally:
        for backend, _host in made:
            backend.close()
