"""Every operator tool in host-cache mode (issue 44): a real host cache service process, a rank in
host-cache mode with its own admin endpoint (as the backend builds it), four threads calling the
rank's store the way SGLang does and checking every byte they read, while ``hicache-mooncake admin``
(the real command, finding endpoints in the discovery directory) resizes the service's DRAM both
ways, drains and detaches its SSD and attaches one again, freezes and unfreezes it, clears one
tenant, and pins pages, opens and closes a session and marks pages shared through the rank, whose
hints reach the service's policy: pinned pages survive pressure there (4 of 4) while unpinned ones
do not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from host_cache_procs import PrivateHostCache, pid_alive, service_pids
from ops_helpers import TOKEN
from store_load import StoreLoad, page_bytes, parts

from hicache_mooncake.admin.client import AdminClient, AdminError, rank_endpoints
from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.cli import main
from hicache_mooncake.config import validate_config
from hicache_mooncake.host_cache.admin_endpoint import client_labels
from hicache_mooncake.host_cache.hint_forward import ForwardingHints
from hicache_mooncake.keys import KeySpace, RankInfo, build_keyspace
from hicache_mooncake.store_builder import build_client_store
from hicache_mooncake.tiers.tiered_store import TieredStore

pytestmark = pytest.mark.integration
MiB = 1 << 20


class Rank:
    """A rank in host-cache mode: the store and the admin endpoint the backend builds (its labels
    and its page-hash -> store-key mapping), the service started by the store's attach."""

    def __init__(self, hc: PrivateHostCache, tmp: Path) -> None:
        token = tmp / "admin.token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        self.discovery = tmp / "discovery"
        extra = hc.extra(
            policy="reuse",
            host_cache="on",
            dram={"capacity": "8MiB", "slab_size": "1MiB", "prefault": False},
            ssd={"capacity": "16MiB", "max_capacity": "32MiB", "direct_io": "off"},
            warm={"interval_s": 0},
        )
        extra["admin"] = {"port": 0, "token_file": str(token), "discovery_dir": str(self.discovery)}
        extra["metrics"] = {"port": None}
        extra["host_cache"]["metrics_port"] = None
        self.config = validate_config(extra)
        self.store: TieredStore = build_client_store(self.config, "rank0", True)
        self.space: KeySpace = build_keyspace("m", "", {"page_size": 64}, "v1", RankInfo())
        space = self.space
        context = AdminContext(
            self.store,
            labels={"model": "m", "rank": "0", **client_labels(self.config, True)},
            store_keys=lambda hashes, tenant: (
                space.for_tenant(tenant) if tenant is not None else space
            ).keys(hashes),
        )
        self.admin = AdminServer(self.config.admin, context, 0)
        self.admin.start()

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
        """``hicache-mooncake admin --json ARGV`` through the discovery directory; its answers by
        endpoint name ("rank 0", "host cache host-cache"), every one without an error."""
        code = main(["admin", "--discovery-dir", str(self.discovery), "--token-file",
                     self.config.admin.token_file, "--json", *argv])  # fmt: skip
        out = capsys.readouterr().out
        assert code == 0, out
        start = 0 if out.startswith("{") else out.index("\n{")  # the JSON follows the progress lines
        by_url = json.loads(out[start:])
        names = {e.url: e.name for e in rank_endpoints(self.discovery)}
        return {names.get(url, url): answer for url, answer in by_url.items()}

    def service(self) -> AdminClient:
        [service] = [e for e in rank_endpoints(self.discovery) if e.labels.get("role") == "host-cache"]
        return AdminClient(service.url, TOKEN)

    def close(self) -> None:
        self.admin.close()
        self.store.close()


@pytest.fixture
def rank(host_cache: PrivateHostCache, tmp_path: Path) -> Iterator[Rank]:
    r = Rank(host_cache, tmp_path)
    try:
        yield r
    finally:
        r.close()


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def _proc_state(pid: int) -> str:
    """The kernel's view of ``pid`` (its status lines that say whether and how it lives)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            lines = [
                ln.strip() for ln in f if ln.split(":")[0] in ("Name", "State", "Tgid", "PPid", "Threads")
            ]
    except OSError as exc:
        return f"/proc/{pid}: {exc}"
    return ", ".join(lines)


def put_pages(store: TieredStore, keys: list[str]) -> None:
    assert all(store.put_batch(keys, [parts(page_bytes(k)) for k in keys]))


def read_exact(store: TieredStore, keys: list[str]) -> list[bool]:
    """Each page read back with its exact bytes (False: a miss)."""
    bufs = [np.zeros(len(page_bytes(k)), np.uint8) for k in keys]
    got = store.get_batch_into(keys, [parts(b) for b in bufs])
    for key, buf, ok in zip(keys, bufs, got, strict=True):
        assert not ok or np.array_equal(buf, page_bytes(key)), f"wrong bytes for {key}"
    return got


def test_every_admin_operation_reaches_the_service_under_load(
    rank: Rank, host_cache: PrivateHostCache, capsys: pytest.CaptureFixture[str]
) -> None:
    store, space = rank.store, rank.space
    service_pid = host_cache.wait_pid()
    wait_for(lambda: any(e.labels.get("role") == "host-cache" for e in rank_endpoints(rank.discovery)))
    service = rank.service()
    shown = rank.cli(capsys, "show")
    assert [t["name"] for t in shown["host cache host-cache"]["tiers"]] == ["dram", "ssd"]
    assert [t["name"] for t in shown["rank 0"]["tiers"]] == ["host_cache"]

    a_keys = [f"m/base~a/t{i}" for i in range(24)]  # tenant a's pages, cleared below
    with StoreLoad(store) as load:
        load.wait_ops(300)
        # ---- resize the service's DRAM down and up: sent to the service, not to the rank
        [op] = rank.cli(capsys, "resize", "dram", "2MiB").values()
        assert op["complete"] and op["progress"]["capacity"] == 2 * MiB
        assert service.show()["tiers"][0]["capacity_bytes"] == 2 * MiB
        load.wait_ops(300)
        [op] = rank.cli(capsys, "resize", "dram", "6MiB").values()
        assert op["complete"] and service.show()["tiers"][0]["capacity_bytes"] == 6 * MiB
        load.wait_ops(300)
        # ---- freeze / unfreeze: the service refuses new pages, reads go on
        [answer] = rank.cli(capsys, "freeze").values()
        assert answer["frozen"] is True and service.show()["frozen"] is True
        reads = load.stats.counts["read"]
        assert store.put_batch(["m/base/frozen"], [parts(page_bytes("m/base/frozen"))]) == [False]
        load.wait_ops(200)
        assert load.stats.counts["read"] > reads
        rank.cli(capsys, "unfreeze")
        assert service.show()["frozen"] is False
        load.wait_ops(200)
        # ---- clear tenant a: its pages are gone from every tier of the service, the load's stay
        stored = store.put_batch(a_keys, [parts(page_bytes(k)) for k in a_keys])
        # (failed once in ~30 runs: one page refused; the figures say which tier and why)
        assert all(stored), (
            f"refused {[k for k, ok in zip(a_keys, stored, strict=True) if not ok]}; "
            f"rank: {store.stats()}; service: {service.show()}"
        )
        assert sum(store.contains_batch(a_keys)) > 0
        [op] = rank.cli(capsys, "clear", "--tenant", "a").values()
        assert op["complete"] and op["progress"]["pages_removed"] > 0
        assert store.contains_batch(a_keys) == [False] * len(a_keys)
        load.wait_ops(300)
        # ---- detach the SSD (drain), then the hints on DRAM alone
        [op] = rank.cli(capsys, "detach", "ssd").values()
        assert op["complete"] and op["progress"]["tiers"] == ["dram"]
        load.wait_ops(300)
    load.assert_clean()

    # ---- pins: given to the rank (page hashes), applied by the service's policy
    pinned = [f"{i:064x}" for i in range(4)]
    plain = [f"{i + 100:064x}" for i in range(4)]
    put_pages(store, space.keys(pinned))
    put_pages(store, space.keys(plain))
    [answer] = rank.cli(capsys, "hint", "pin", *pinned, "--ttl", "3600").values()
    assert answer["pages"] == 4 and answer["hints"]["keys_pinned"] == 4  # the service's count
    assert service.hints()["hints"]["keys_pinned"] == 4
    for r in range(0, 3 * 6 * MiB // (16 << 10), 8):  # three times what DRAM holds
        put_pages(store, space.keys([f"p{r}-{j}" for j in range(8)]))
    assert read_exact(store, space.keys(plain)) == [False] * 4  # the pressure was real
    assert read_exact(store, space.keys(pinned)) == [True] * 4  # 4 of 4 pinned pages survive
    rank.cli(capsys, "hint", "unpin", *pinned)
    assert service.hints()["hints"]["keys_pinned"] == 0

    # ---- sessions and shared marks reach the service's policy; SGLang's own session ids too
    rank.cli(capsys, "hint", "session-open", "conv-1", *plain)
    assert service.hints()["hints"]["sessions_open"] == 1
    rank.cli(capsys, "hint", "session-close", "conv-1")
    hints = service.hints()["hints"]
    assert hints["sessions_open"] == 0 and hints["sessions_closed"] == 1
    rank.cli(capsys, "hint", "shared", *pinned, "--ttl", "60")
    assert service.hints()["hints"]["keys_shared"] == 4
    assert isinstance(store.hints, ForwardingHints)
    store.hints.attach("sglang-req-7", space.keys(plain))  # what the backend does at a set
    wait_for(lambda: service.hints()["hints"]["sessions_open"] == 1)

    # ---- attach an SSD again, under load
    with StoreLoad(store, seed=7) as load:
        load.wait_ops(300)
        [op] = rank.cli(capsys, "attach", "ssd", "--path", str(host_cache.tmp / "nvme1"),
                        "--capacity", "16MiB").values()  # fmt: skip
        assert op["complete"] and op["progress"]["tiers"] == ["dram", "ssd"]
        load.wait_ops(900)
    load.assert_clean()
    assert service.show()["tiers"][1]["used_bytes"] > 0
    assert (host_cache.tmp / "nvme1" / "host-cache").is_dir()

    # ---- nothing left behind: the service's endpoint goes with it
    rank.close()
    host_cache.kill(service_pid, 15)
    # (failed once in ~60 runs: alive right after kill() saw it gone; the state says how)
    assert not pid_alive(service_pid), f"{_proc_state(service_pid)}; {host_cache.log_tail()}"
    assert not service_pids(str(host_cache.run_dir))
    assert not [e for e in rank_endpoints(rank.discovery) if e.labels.get("role") == "host-cache"]


def test_a_hint_the_service_cannot_apply_is_an_error_not_a_silent_200(
    rank: Rank, host_cache: PrivateHostCache
) -> None:
    """With the service's endpoint gone (stopped), a pin given to the rank answers an error naming
    the host cache instead of 200 with no effect; a bad keyed request is a 400 naming the field; a
    tier operation sent to the rank by hand (``--url``) names where it runs instead of "no tier"."""
    wait_for(lambda: any(e.labels.get("role") == "host-cache" for e in rank_endpoints(rank.discovery)))
    service = rank.service()
    with pytest.raises(AdminError) as err:
        service.request("POST", "/v1/hints/keys", {"hints": [{"action": "pin", "keys": ["k"]}]})
    assert err.value.status == 400 and "ttl_s" in str(err.value)
    rank_client = AdminClient(rank.admin.url, TOKEN)
    with pytest.raises(AdminError) as err:  # only the service takes store keys
        rank_client.request("POST", "/v1/hints/keys", {"hints": [{"action": "unpin", "keys": ["k"]}]})
    assert err.value.status == 404
    with pytest.raises(AdminError) as err:  # a tier operation named to the rank by hand says where to go
        rank_client.resize("dram", "2MiB")
    assert err.value.status == 400 and "service's own admin endpoint" in str(err.value)
    host_cache.kill(host_cache.wait_pid(), 15)
    with pytest.raises(AdminError) as err:
        rank_client.pin([f"{1:064x}"], 60)
    assert err.value.status == 400 and "host cache 'host-cache'" in str(err.value)
