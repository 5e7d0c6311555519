"""Fixtures of the Mooncake Store tests: a real cluster (``mooncake_master``, segment holders,
optionally etcd and HA masters) and SGLang-side client processes, in one private network
namespace per module (see ``mooncake_procs``)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mooncake_procs import MASTER_PORT, Agent, Etcd, Holder, Master, Netns

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 1.0


def client_extra(master: str, tenant: str = "t", **mooncake: Any) -> dict[str, Any]:
    """The shipped ``configs/mooncake.yaml`` with test-sized tiers, pointed at ``master``."""
    extra = copy.deepcopy(yaml.safe_load((REPO / "configs" / "mooncake.yaml").read_text()))
    extra["namespace"] = {"tenant": tenant}
    extra["tiers"]["dram"].update({"capacity": "8MiB", "slab_size": "1MiB"})
    remote = extra["tiers"]["remote"]
    remote["timeout_s"] = TIMEOUT_S
    remote["mooncake"].update(
        {"master": master, "local_hostname": "127.0.0.1", "retry_interval_s": 0.2, **mooncake}
    )
    return extra


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.ns = Netns(tmp)
        self.agents: list[Agent] = []

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self.ns.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One master, two segment holders, two SGLang clients (pure clients, replica_num 2)."""
    c = Cluster(tmp_path_factory.mktemp("mooncake"))
    try:
        master = Master(c.ns).start()
        addr = f"127.0.0.1:{MASTER_PORT}"
        holders = [Holder(c.ns, f"holder{i}", 50060 + i, addr).start() for i in range(2)]
        extra = client_extra(addr, replica_num=2)
        c.agents = [Agent(c.ns, "client-a", extra), Agent(c.ns, "client-b", extra)]
        for agent in c.agents:
            agent.wait_ready()
        yield {"ns": c.ns, "master": master, "holders": holders, "a": c.agents[0], "b": c.agents[1]}
    finally:
        c.close()


def _started_ha(master: Master, role: str) -> Master:
    """Start an HA master and wait for its role. A master that exits while it starts (seen once on
    the loaded 2-core CI machine, before any client call) is started once more; its log is kept."""
    for attempt in range(2):
        master.start(listen=role == "serving")
        try:
            master.wait_role(role)
            return master
        except RuntimeError:
            if attempt:
                raise
            master.kill()
            master.log.rename(master.log.with_suffix(".first-start.log"))
    return master


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """etcd, two masters with leader election (the first is leader), one holder, two clients that
    find the leader through etcd."""
    c = Cluster(tmp_path_factory.mktemp("mooncake-ha"))
    try:
        etcd = Etcd(c.ns).start()
        ha = ["--enable_ha=true", "--ha_backend_type=etcd", f"--etcd_endpoints=127.0.0.1:{etcd.port}"]
        leader = _started_ha(Master(c.ns, 50051, ha, "master0"), "serving")
        entry = f"etcd://127.0.0.1:{etcd.port}"
        holder = Holder(c.ns, "holder0", 50060, entry).start()
        c.agents = [Agent(c.ns, "ha-a", client_extra(entry)), Agent(c.ns, "ha-b", client_extra(entry))]
        for agent in c.agents:
            agent.wait_ready()
        standby = _started_ha(Master(c.ns, 50052, ha, "master1"), "standby")
        yield {
            "ns": c.ns,
            "leader": leader,
            "standby": standby,
            "holder": holder,
            "a": c.agents[0],
            "b": c.agents[1],
        }
    finally:
        c.close()
