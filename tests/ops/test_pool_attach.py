"""A remote DRAM pool the YAML did not have, attached at runtime through the admin endpoint (a real
memory-node process on loopback), used while four threads keep calling, then detached: no wrong
byte, no exception, nothing left pointing at it."""

from __future__ import annotations

import pytest
from ops_helpers import finished, small_config
from store_load import StoreLoad
from transport_procs import SECRET

pytestmark = pytest.mark.integration


def test_attach_and_detach_a_remote_pool_under_load(tmp_path, stores, admin_for, node_factory, monkeypatch):
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node = node_factory("n0")
    config = small_config(tmp_path, ssd=False)
    store = stores(config)
    admin = admin_for(store, config)
    pool = {
        "tiers": {"remote": {"timeout_s": 2.0}},
        "metadata": {
            "backend": "embedded",
            "nodes": [{"node_id": "n0", "host": "127.0.0.1", "port": node.port}],
        },
    }
    with StoreLoad(store) as load:
        load.wait_ops(300)
        op = finished(admin, admin.attach("remote", pool))
        assert op["complete"] and op["progress"]["tiers"] == ["dram", "remote"]
        load.wait_ops(900)
        remote = store.stats()["remote"]
        assert remote["entries"] > 0  # write-through: the pool took pages under load
        op = finished(admin, admin.detach("remote", "drop"))
        assert op["complete"] and op["progress"]["tiers"] == ["dram"]
        load.wait_ops(300)
    load.assert_clean()
    assert store.pools == ()
