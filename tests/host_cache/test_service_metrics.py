"""The host cache service's metrics are on by default: with no ``host_cache.metrics_port`` in the
YAML the service serves its per-tier and per-client figures on a free loopback port, registers it
where the ranks register theirs, and ``hicache-mooncake stats`` shows the service with the clients
attached to it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from host_cache_procs import REPO, PrivateHostCache

from hicache_mooncake.cli import main
from hicache_mooncake.config import MetricsConfig, validate_config
from hicache_mooncake.metrics import discovery as metrics_discovery
from hicache_mooncake.metrics.rank import BackendMetrics, RankLabels
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration


def service_endpoint(directory: Path, pid: int, timeout: float = 20.0) -> metrics_discovery.Endpoint:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in metrics_discovery.endpoints(directory) if e.role == "host-cache" and e.pid == pid]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"the service (pid {pid}) registered no metrics endpoint in {directory}")


def test_the_service_serves_its_metrics_by_default_and_stats_shows_it_with_its_clients(
    host_cache: PrivateHostCache, capsys: pytest.CaptureFixture[str]
) -> None:
    discovery = host_cache.tmp / "discovery"
    extra = host_cache.extra(host_cache="on")
    extra["metrics"] = {**extra.get("metrics", {}), "discovery_dir": str(discovery)}
    assert "metrics_port" not in extra["host_cache"]  # the default: nothing configured
    config = validate_config(extra)
    store = build_client_store(config, "rank0", True)
    # this process is a rank too: it serves its own metrics (its one tier: host_cache), as a backend does
    rank = BackendMetrics(store.stats, RankLabels("org/m", 0))
    try:
        assert rank.serve(MetricsConfig(port=0, discovery_dir=str(discovery)), lambda: (True, {})) > 0
        pid = host_cache.wait_pid()
        pages = [np.full(8192, i, dtype=np.uint8) for i in range(2)]
        assert store.put_batch(["m0", "m1"], [[memoryview(p)] for p in pages]) == [True, True]
        endpoint = service_endpoint(discovery, pid)
        assert endpoint.url.startswith("http://127.0.0.1:")
        text = urllib.request.urlopen(endpoint.url, timeout=5).read().decode()
        assert re.search(r'hicache_mooncake:tier_entries\{[^}]*tier="dram"[^}]*\} 2\.0', text), text
        assert re.search(r'hicache_mooncake:tier_capacity_bytes\{[^}]*tier="ssd"[^}]*\} ', text), text
        me = f"pid:{os.getpid()}"
        assert f'hicache_mooncake_host_cache_client_committed_total{{client="{me}"}} 2.0' in text
        # the dashboard's host cache panels query series this service serves
        dashboard = json.loads((REPO / "deploy" / "grafana" / "hicache-mooncake.json").read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        queried = {n for e in exprs for n in re.findall(r"hicache_mooncake_host_cache_client_[a-z_]+", e)}
        assert len(queried) >= 3
        for name in queried:
            assert re.search(rf"^{name}\{{client=", text, re.M), name
        assert any('node=~"host-cache-.*"' in e and "tier_degraded" in e for e in exprs)
        assert 'hicache_mooncake:tier_degraded{node="host-cache-host-cache",tier="ssd"}' in text

        cmd = [sys.executable, "-m", "hicache_mooncake", "stats", "--dir", str(discovery)]
        table = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert "host cache host-cache-host-cache:" in table.stdout, table.stdout
        assert re.search(r"svc dram\s+2 ", table.stdout), table.stdout
        assert re.search(r"svc ssd\s", table.stdout), table.stdout
        assert re.search(r"^\s+0 host_cache ", table.stdout, re.M), table.stdout  # the rank's own row
        assert f"client {me} = model org/m rank 0: " in table.stdout and "2 stored" in table.stdout, (
            table.stdout
        )

        assert main(["stats", "--dir", str(discovery), "--json"]) == 0  # in this process: cheaper
        [cache] = json.loads(capsys.readouterr().out)["host_caches"]
        assert cache["tiers"]["dram"]["entries"] == 2
        assert cache["clients"][me]["committed"] == 2
    finally:
        rank.close()
        store.close()
