"""``tiers.remote.engine: rdma`` at attach: TCP fallback (said once) where this host has no
device, refusal with the reason and the key under ``fallback: none``, and nothing leaked either
way (issue 8 item 11's RDMA half, issue 9 item 9)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rdma_sim import Fabric, no_fabric
from transport_procs import SECRET, NodeProc

from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.store_builder import build_store
from hicache_mooncake.tiers.tiered_store import TieredStore

pytestmark = pytest.mark.integration


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def membership_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "hicache-membership")


def config(port: int, fallback: str, **rdma: Any) -> Any:
    return validate_config(
        {
            "tiers": {
                "dram": {"enabled": False},
                "ssd": {"enabled": False},
                "remote": {"enabled": True, "engine": "rdma", "rdma": {"fallback": fallback, **rdma}},
            },
            "metadata": {"backend": "embedded", "nodes": [{"node_id": "n1", "port": port}]},
        }
    )


@pytest.fixture
def tcp_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeProc]:
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node = NodeProc(tmp_path, "n1", None, "t").start()
    try:
        yield node
    finally:
        node.stop()


def roundtrip(store: TieredStore) -> bool:
    page = bytearray(os.urandom(8192))
    out = bytearray(len(page))
    return bool(
        store.put_batch(["k"], [[memoryview(page)]]) == [True]
        and store.get_batch_into(["k"], [[memoryview(out)]]) == [True]
        and out == page
    )


@pytest.mark.parametrize("why", ["no device", "no pyverbs device list"])
def test_rdma_without_a_device_falls_back_to_tcp_and_says_so_once(
    tcp_node: NodeProc, tmp_path: Path, caplog: pytest.LogCaptureFixture, why: str
) -> None:
    ctx: Any = Fabric(tmp_path / "empty", {"devices": []}) if why == "no device" else no_fabric()
    with ctx, caplog.at_level(logging.WARNING):
        store = build_store(config(tcp_node.port, "tcp"))
        try:
            tier = store.tier("remote")
            assert tier is not None and tier.client.engine_name == "tcp"  # type: ignore[attr-defined]
            assert roundtrip(store)
        finally:
            store.close()
    said = [r.getMessage() for r in caplog.records if "rdma is unavailable" in r.getMessage()]
    assert len(said) == 1 and "tiers.remote.rdma.fallback: tcp" in said[0] and "uses TCP" in said[0]


def test_fallback_none_refuses_the_attach_with_the_reason_and_leaks_nothing(tcp_node: NodeProc) -> None:
    with no_fabric():
        fds, threads = open_fds(), membership_threads()
        for _ in range(3):
            with pytest.raises(ValueError) as exc:
                build_store(config(tcp_node.port, "none"))
            msg = str(exc.value)
            assert "tiers.remote.engine: rdma is unavailable" in msg and "tiers.remote.rdma.fallback" in msg
            assert "devices list" in msg  # the reason
        assert membership_threads() == threads
        assert open_fds() <= fds


def test_an_unusable_gid_index_is_a_setup_failure_handled_by_fallback(
    tmp_path: Path, tcp_node: NodeProc
) -> None:
    with Fabric(tmp_path / "fabric"):
        with pytest.raises(ValueError, match="GID index 9"):
            build_store(config(tcp_node.port, "none", gid_index=9))
        store = build_store(config(tcp_node.port, "tcp", gid_index=9))
        try:
            assert roundtrip(store)
        finally:
            store.close()
