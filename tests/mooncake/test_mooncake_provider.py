"""The Mooncake provider when the master is not there yet: SGLang may start before the cluster.
The tier's calls are misses within the deadline, and it connects by itself once the master is up
(the provider registers the announced buffers then, and pages move zero copy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mooncake_procs import MASTER_PORT, Master, Netns

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


def test_started_before_the_master_the_tier_misses_then_connects_by_itself(tmp_path: Path) -> None:
    ns = Netns(tmp_path)
    try:
        err = (tmp_path / "client.err").open("ab")
        client = ns.popen(
            [sys.executable, str(HERE / "late_master_client.py"), f"127.0.0.1:{MASTER_PORT}"],
            None,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert client.stdin is not None and client.stdout is not None
        first = json.loads(client.stdout.readline())
        assert first["built_s"] < 1.0 + 1.5  # the first connection attempt is bounded too
        exists, put = first["calls"]
        assert exists["result"] == [False] * 4 and put["result"] == [False] * 4
        assert exists["elapsed"] < 1.5 and put["elapsed"] < 1.5
        Master(ns).start()
        client.stdin.write("go\n")
        client.stdin.flush()
        second = json.loads(client.stdout.readline())
        assert second["rejoin_s"] < 30
        assert second["got"] == [True] * 4 and second["same"]
        pool = second["stats"]
        assert pool["connected"] and pool["client"]["direct_puts"] >= 4 and not pool["guard"]["open"]
        client.wait(30)
    finally:
        ns.close()
        err.close()
