"""TP=2 from ONE YAML: two scheduler-rank processes, each a backend built through SGLang's factory
from the same file with one ``metrics.port``, both export (base + rank) with their own labels; the
memory node of the same file answers ``/healthz``; ``stats`` finds all of them."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from transport_procs import SECRET, NodeProc, free_port, node_env

from hicache_mooncake.cli import main
from hicache_mooncake.metrics.scrape import scrape

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
HERE = Path(__file__).resolve().parent


def two_free_ports() -> int:
    """A port ``p`` with ``p + 1`` free too (checked by binding both)."""
    for _ in range(50):
        base = free_port()
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", base))
                b.bind(("127.0.0.1", base + 1))
            return base
        except OSError:
            continue
    raise RuntimeError("no two adjacent free ports")


def test_two_ranks_from_one_yaml_export_side_by_side(tmp_path, capsys):
    base, node_port, node_metrics = two_free_ports(), free_port(), free_port()
    disc = tmp_path / "disc"
    config = {
        "backend_name": "hicache-mooncake",
        "module_path": "hicache_mooncake.backend",
        "class_name": "HiCacheMooncakeBackend",
        "interface_v1": 1,
        "tiers": {
            "dram": {"capacity": "16MiB", "slab_size": "1MiB"},
            "ssd": {
                "enabled": True,
                "path": str(tmp_path / "ssd"),
                "capacity": "32MiB",
                "region_size": "4MiB",
                "min_free": 0,
            },
            "remote": {"enabled": True, "engine": "tcp", "timeout_s": 5.0},
        },  # fmt: skip
        "metadata": {
            "backend": "embedded",
            "nodes": [{"node_id": "n1", "host": "127.0.0.1", "port": node_port}],
        },
        "metrics": {"port": base, "discovery_dir": str(disc)},
        "node": {
            "node_id": "n1",
            "port": node_port,
            "capacity": "32MiB",
            "shm": False,
            "drain_timeout_s": 2,
            "metrics": {"port": node_metrics, "discovery_dir": str(disc)},
        },
        "sglang": {"page_size": 16, "hicache_mem_layout": "page_first"},
    }
    path = tmp_path / "tp2.yaml"
    path.write_text(yaml.safe_dump(config))
    node = NodeProc(tmp_path, "n1", None, "t")
    node.cfg_path = path  # the one YAML, not NodeProc's own
    node.start()
    ranks: list[subprocess.Popen[bytes]] = []
    try:
        for rank in (0, 1):
            log = open(tmp_path / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed with the process
            ranks.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(HERE / "scheduler_rank.py"),
                        str(path),
                        str(rank),
                        "2",
                        str(tmp_path / f"r{rank}"),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=node_env(SECRET),
                )
            )
        ready = []
        for rank, proc in enumerate(ranks):
            file = tmp_path / f"r{rank}"
            deadline = time.monotonic() + 300
            while not file.exists():
                assert proc.poll() is None, (tmp_path / f"rank{rank}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "rank did not come up"
                time.sleep(0.1)
            ready.append(json.loads(file.read_text()))
        assert [r["port"] for r in ready] == [base, base + 1]
        assert all(r["stored"] and r["loaded"] and r["same"] for r in ready), ready

        for rank in (0, 1):
            report = scrape(f"http://127.0.0.1:{base + rank}/metrics")
            assert report.labels == {"model": "org/demo-model", "rank": str(rank)}
            assert report.tiers["dram"]["hits"] == 16 and report.tiers["dram"]["entries"] == 16
            assert report.tiers["remote"]["written_bytes"] > 0  # write-through to the node
            assert report.tiers["dram"]["latency_s"]["get"]["p50"] > 0
            assert report.process["pages"] == {"set": {"ok": 16}, "get": {"ok": 16}}

        health = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{node_metrics}/healthz", timeout=5).read()
        )
        assert health["status"] == "ok" and health["node"] == "n1"
        node_report = scrape(f"http://127.0.0.1:{node_metrics}/metrics")
        assert node_report.labels == {"node": "n1"} and node_report.process["entries"] == 32

        assert main(["stats", "--config", str(path), "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert [r["rank"] for r in found["ranks"]] == ["0", "1"] and [n["node"] for n in found["nodes"]] == [
            "n1"
        ]
        assert found["total"]["dram"]["entries"] == 32
    finally:
        for proc in ranks:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in ranks:
            try:
                assert proc.wait(60) == 0
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                raise
        node.stop()
    assert main(["stats", "--config", str(path)]) == 2  # everyone is gone, and so are their entries
