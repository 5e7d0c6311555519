"""The host cache service watches what it serves from: a removed SSD directory degrades the SSD tier
loudly (stats, metrics, log, ``host-cache status``) while DRAM keeps serving and no call hangs; a
removed socket (its runtime directory gone) makes it stop and exit non-zero instead of running on
unreachable. ``host-cache status`` says what runs, for whom, since when; ``host-cache stop`` drains
it and waits for it to exit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from host_cache_procs import PrivateHostCache, pid_alive

from hicache_mooncake.config import validate_config
from hicache_mooncake.metrics import discovery as metrics_discovery
from hicache_mooncake.metrics.rank import BackendMetrics, RankLabels
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hicache_mooncake", *args], capture_output=True, text=True, timeout=timeout
    )


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The same command in this process (cheaper than a new interpreter): (exit code, stdout)."""
    from hicache_mooncake.cli import main

    rc = main(list(args))
    return rc, capsys.readouterr().out


def wait_for(what: str, check: object, timeout: float, log: PrivateHostCache) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s: {log.log_tail()}"
        time.sleep(0.05)


def test_a_removed_ssd_directory_degrades_the_tier_loudly_and_dram_keeps_serving(
    host_cache: PrivateHostCache, capsys: pytest.CaptureFixture[str]
) -> None:
    discovery = host_cache.tmp / "discovery"
    extra = host_cache.extra(host_cache="on", warm={"interval_s": 0.5})  # a snapshot every 0.5 s
    extra["metrics"] = {**extra.get("metrics", {}), "discovery_dir": str(discovery)}
    yaml_path = host_cache.write_yaml(extra)
    store = build_client_store(validate_config(extra), "rank0", True)
    try:
        pid = host_cache.wait_pid()
        page = np.full(8192, 7, dtype=np.uint8)
        assert store.put_batch(["kept"], [[memoryview(page)]]) == [True]
        assert host_cache.stats()["store"]["tiers"]["ssd"]["degraded"] is False

        shutil.rmtree(host_cache.ssd_dir)
        removed = time.monotonic()
        wait_for(
            "the SSD tier degraded",
            lambda: host_cache.stats()["store"]["tiers"]["ssd"]["degraded"],
            timeout=10,
            log=host_cache,
        )
        assert time.monotonic() - removed < 6  # checked every few seconds
        ssd = host_cache.stats()["store"]["tiers"]["ssd"]
        assert "was removed" in ssd["degraded_reason"], ssd
        assert (
            "SSD tier degraded" in host_cache.log_tail() and str(host_cache.ssd_dir) in host_cache.log_tail()
        )
        [endpoint] = [e for e in metrics_discovery.endpoints(discovery) if e.pid == pid]
        text = urllib.request.urlopen(endpoint.url, timeout=5).read().decode()
        assert re.search(r'hicache_mooncake:tier_degraded\{[^}]*tier="ssd"[^}]*\} 1\.0', text), text

        rc, out = run_main(capsys, "host-cache", "status", "--config", str(yaml_path))
        assert rc == 0 and re.search(r"tier ssd .*DEGRADED: .*was removed", out), out

        # the service keeps serving from DRAM; nothing waits on the missing disk
        started = time.monotonic()
        out = np.zeros(8192, np.uint8)
        assert store.get_batch_into(["kept"], [[memoryview(out)]]) == [True] and out[0] == 7
        assert store.put_batch(["new"], [[memoryview(page)]]) == [True]
        assert store.exists_prefix(["never-stored"]) == 0
        assert time.monotonic() - started < 2.0
        assert pid_alive(pid) and host_cache.pid() == pid
        assert log_lines(host_cache, "SSD tier degraded") == 1  # one loud line, not one per check
        # the degraded tier takes no snapshot writes: no failure logged per interval
        failed = log_lines(host_cache, "cannot write the snapshot")
        assert failed <= 1  # one may have raced the check
        time.sleep(2.0)
        assert log_lines(host_cache, "cannot write the snapshot") == failed, host_cache.log_tail()
    finally:
        store.close()


def log_lines(host_cache: PrivateHostCache, text: str) -> int:
    return (host_cache.run_dir / "host-cache.log").read_text().count(text)


def test_status_says_what_runs_for_whom_and_stop_drains_it(
    host_cache: PrivateHostCache, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = host_cache.extra(host_cache="on")
    extra["metrics"] = {**extra.get("metrics", {}), "discovery_dir": str(host_cache.tmp / "discovery")}
    yaml_path = host_cache.write_yaml(extra)
    config = validate_config(extra)
    store = build_client_store(config, "rank0", True)
    rank = BackendMetrics(store.stats, RankLabels("org/m", 0))  # this process serves as rank 0
    try:
        assert rank.serve(config.metrics.model_copy(update={"port": 0}), lambda: (True, {})) > 0
        pid = host_cache.wait_pid()
        page = np.full(8192, 3, dtype=np.uint8)
        assert store.put_batch(["s0"], [[memoryview(page)]]) == [True]
        status = cli("host-cache", "status", "--config", str(yaml_path))
        assert status.returncode == 0, status.stderr
        text = status.stdout
        assert f"running, pid {pid}, socket {host_cache.socket}" in text, text
        assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(up \d+h\d\dm\d\ds\), config /", text), text
        assert "metrics http://127.0.0.1:" in text, text
        assert re.search(r"tier dram\s+1 entries, .* of 8\.0 ?MiB", text), text
        assert "clients attached: 1" in text and f"pid:{os.getpid()} (rank 0 of org/m): " in text, text
    finally:
        rank.close()
        store.close()  # the client goes; the service stays (idle_timeout_s: 120)
    rc, out = run_main(capsys, "host-cache", "stop", "--config", str(yaml_path), "--timeout", "30")
    assert rc == 0 and f"pid {pid} drained and stopped" in out, out
    assert not pid_alive(pid) and not host_cache.socket.exists()
    assert not (host_cache.run_dir / "host-cache.status.json").exists()
    assert "drained" in host_cache.log_tail()
    rc, out = run_main(capsys, "host-cache", "status", "--config", str(yaml_path))
    assert rc == 3 and "not running" in out
    rc, out = run_main(capsys, "host-cache", "stop", "--config", str(yaml_path))
    assert rc == 0 and "not running" in out


def test_a_service_whose_socket_was_removed_stops_and_exits_non_zero(host_cache: PrivateHostCache) -> None:
    """Run by hand (as a service manager runs it): nobody can reach it any more, so it exits
    (systemd's Restart=on-failure then starts a reachable one) instead of holding the lock."""
    extra = host_cache.extra(host_cache="on")
    extra["host_cache"]["autostart"] = False
    extra["metrics"] = {**extra.get("metrics", {}), "discovery_dir": str(host_cache.tmp / "discovery")}
    yaml_path = host_cache.write_yaml(extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_mooncake", "host-cache", "--config", str(yaml_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    host_cache.seen.add(proc.pid)
    try:
        deadline = time.monotonic() + 60
        while not host_cache.socket.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stdout.read() if proc.stdout else ""
            )
            time.sleep(0.05)
        os.unlink(host_cache.socket)
        rc = proc.wait(timeout=15)
        output = proc.stdout.read() if proc.stdout else ""
        assert rc == 1, output
        assert "no client can reach this service" in output, output
        assert host_cache.pid() is None  # the lock is free: the next start is not refused
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_health_watch_finds_a_directory_made_again_and_its_probe_leaves_nothing(tmp_path: Path) -> None:
    from hicache_mooncake.host_cache.health import PROBE_PREFIX, ServiceWatch, write_probe

    write_probe(str(tmp_path))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(PROBE_PREFIX)]  # leaves nothing
    reasons: list[str] = []
    (tmp_path / "ssd").mkdir()
    watch = ServiceWatch([str(tmp_path / "ssd")], reasons.append, [], lambda _r: None, probe_every_s=0)
    watch.check()
    assert reasons == [] and watch.ssd_problem == ""
    (tmp_path / "ssd").rmdir()
    (tmp_path / "ssd").mkdir()  # made again: another directory than the tier opened
    watch.check()
    assert watch.ssd_problem and "was removed and made again" in reasons[-1]
    assert watch.ssd_episodes == 1


def test_a_replaced_lock_file_is_fatal(tmp_path: Path) -> None:
    """Without its lock file a second service could take a new lock beside this one: stop."""
    from hicache_mooncake.host_cache.health import ServiceWatch, WatchedFile, identity

    lock = tmp_path / "host-cache.lock"
    with lock.open("w") as held:  # the service holds its lock file open for its whole life
        ident = identity(str(lock))
        assert ident is not None
        fatal: list[str] = []
        watch = ServiceWatch(
            [], lambda _r: None, [WatchedFile("lock file", str(lock), ident, "x")], fatal.append
        )
        watch.check()
        assert fatal == [] and not held.closed
        lock.unlink()
        lock.touch()  # a new file at the path: not the lock this service holds
        watch.check()
    assert fatal == [f"its lock file {lock} was replaced by another file"] and watch.fatal == fatal[0]
