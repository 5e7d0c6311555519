"""The host cache service as real processes (no SGLang): exactly one service however many clients
race to start it, it stops when idle and leaves nothing behind, a client that dies leaves no
reservation, a killed service's arena is collected by the next one, and only our user is served."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from host_cache_procs import PrivateHostCache, pid_alive, service_pids

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration
CLIENT = Path(__file__).with_name("client_proc.py")


def run_client(mode: str, yaml_path: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CLIENT), mode, str(yaml_path), str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def connect_as_nobody(directory: Path, name: str) -> int:
    """Connect to ``directory/name`` as uid 65534 (a forked child: cwd entered as root, then
    setuid); returns how many bytes the server sent before closing (-1: the child failed)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os and socket calls, then _exit
        code = 255
        try:
            os.close(read)
            os.chdir(directory)
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(name)
                os.write(write, str(len(sock.recv(100))).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        got = f.read()
    _, status = os.waitpid(pid, 0)
    return int(got) if os.waitstatus_to_exitcode(status) == 0 and got else -1


def test_eight_clients_racing_to_start_it_get_exactly_one_service(host_cache: PrivateHostCache) -> None:
    yaml_path = host_cache.write_yaml(host_cache.extra(host_cache="on"))
    go = host_cache.tmp / "go"
    outs = [host_cache.tmp / f"out{i}.json" for i in range(8)]
    procs = [run_client("race", yaml_path, out, str(go)) for out in outs]
    try:
        time.sleep(1.0)  # let all eight import and wait at the line
        go.touch()
        logs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), logs
    results = [json.loads(out.read_text()) for out in outs]
    pids = {r["service_pid"] for r in results}
    assert len(pids) == 1 and None not in pids, results
    [pid] = pids
    assert host_cache.pid() == pid
    assert service_pids(str(host_cache.run_dir)) == [pid]  # one service process, no second one
    assert sum("started the host cache service" in log for log in logs) == 1
    assert all(r["stored"] == [True] for r in results)
    stats = host_cache.stats()
    assert stats["store"]["objects"] == 8  # every client's page in the one cache
    assert stats["departed"]["clients"] == 8


def test_it_stops_when_idle_and_removes_its_socket_and_arena(host_cache: PrivateHostCache) -> None:
    host_cache.host_cache["idle_timeout_s"] = 1.0
    config = validate_config(host_cache.extra(host_cache="on"))
    store = build_client_store(config, "rank0", True)
    pid = host_cache.wait_pid()
    assert list(host_cache.shm_dir.iterdir())  # its arena
    time.sleep(2.0)
    assert pid_alive(pid)  # a connected client keeps it up
    store.close()
    deadline = time.monotonic() + 20
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid), host_cache.log_tail()
    assert not host_cache.socket.exists()
    assert not list(host_cache.shm_dir.iterdir())
    assert host_cache.pid() is None  # the lock is free again


def test_a_client_that_dies_leaves_no_reservation_behind(host_cache: PrivateHostCache) -> None:
    config = validate_config(host_cache.extra(host_cache="on"))
    store = build_client_store(config, "rank0", True)  # starts the service
    try:
        host_cache.wait_pid()
        used = host_cache.stats()["store"]["used"]
        yaml_path = host_cache.write_yaml(host_cache.extra(host_cache="on"))
        out = host_cache.tmp / "orphan.json"
        proc = run_client("reserve-and-die", yaml_path, out)
        assert proc.wait(60) == 9
        assert json.loads(out.read_text())["status"] == 0  # it held a reservation when it died
        deadline = time.monotonic() + 10
        while True:
            stats = host_cache.stats()
            if stats["store"]["pending"] == 0 and stats["departed"].get("released_on_disconnect"):
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        assert stats["store"]["used"] == used
        assert not store.exists_prefix(["orphan"])
    finally:
        store.close()


def test_a_killed_services_arena_is_collected_and_its_ssd_data_recovered(
    host_cache: PrivateHostCache,
) -> None:
    config = validate_config(
        host_cache.extra(host_cache="on", ssd={"enabled": True, "mode": "write_through"})
    )
    store = build_client_store(config, "rank0", True)
    try:
        first = host_cache.wait_pid()
        pages = {f"p{i}": np.random.default_rng(i).integers(0, 256, 20_000, dtype=np.uint8) for i in range(6)}
        assert store.put_batch(list(pages), [[memoryview(v)] for v in pages.values()]) == [True] * 6
        deadline = time.monotonic() + 20
        while host_cache.stats()["store"]["tiers"]["ssd"]["entries"] < 6:  # written through to SSD
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [old_arena] = list(host_cache.shm_dir.iterdir())
        host_cache.kill(first)
        assert old_arena.exists()  # a killed process cannot remove its arena
        second = host_cache.wait_pid(other_than=first)  # restarted by this client's keeper
        assert not old_arena.exists()  # the next service collected it
        outs = {k: np.zeros_like(v) for k, v in pages.items()}
        deadline = time.monotonic() + 20
        while not all(store.get_batch_into(list(outs), [[memoryview(o)] for o in outs.values()])):
            assert time.monotonic() < deadline, host_cache.log_tail()
            time.sleep(0.1)
        assert all(np.array_equal(outs[k], pages[k]) for k in pages)
        assert second != first
    finally:
        store.close()


def test_only_the_services_own_user_is_served(host_cache: PrivateHostCache) -> None:
    config = validate_config(host_cache.extra(host_cache="on"))
    store = build_client_store(config, "rank0", True)
    try:
        host_cache.wait_pid()
        assert (host_cache.socket.stat().st_mode & 0o777) == 0o600
        if os.geteuid() != 0:
            return  # only root can act as another user here; the file mode is the first guard
        os.chmod(host_cache.socket, 0o666)  # take the file mode away: the credential check remains
        os.chmod(host_cache.run_dir, 0o755)
        assert connect_as_nobody(host_cache.run_dir, host_cache.socket.name) == 0  # closed: no challenge
        assert host_cache.stats()["errors"].get("refused_peer_uid") == 1
    finally:
        os.chmod(host_cache.run_dir, 0o700)
        store.close()


def test_auto_attaches_to_a_running_service_and_off_never_does(host_cache: PrivateHostCache) -> None:
    from hicache_mooncake.host_cache.mode import use_host_cache

    auto = validate_config(host_cache.extra(host_cache="auto"))
    assert use_host_cache(auto, False, 1)[0] is False  # nothing runs: a TP1 process stays in-process
    assert use_host_cache(auto, True, 2)[0] is True  # MLA at TP > 1
    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        assert use_host_cache(auto, False, 1)[0] is True  # it runs now: everyone shares it
        off = validate_config(host_cache.extra(host_cache="off"))
        assert use_host_cache(off, True, 8)[0] is False
    finally:
        store.close()
        for pid in list(host_cache.seen):
            host_cache.kill(pid, signal.SIGTERM)


def test_without_a_service_a_backend_serves_misses_at_once_and_attaches_when_one_appears(
    host_cache: PrivateHostCache,
) -> None:
    """autostart off (the systemd way): attach waits start_timeout_s at most, calls are misses, and
    the client finds the service by itself once an operator starts it."""
    extra = host_cache.extra(host_cache="on")
    extra["host_cache"].update({"autostart": False, "start_timeout_s": 0.5})
    config = validate_config(extra)
    t0 = time.monotonic()
    store = build_client_store(config, "rank0", True)
    try:
        assert time.monotonic() - t0 < 3.0
        page = np.arange(4096, dtype=np.uint8)
        t0 = time.monotonic()
        assert store.put_batch(["k"], [[memoryview(page)]]) == [False]
        assert store.exists_prefix(["k"]) == 0
        assert time.monotonic() - t0 < 1.0  # misses, not waits
        assert host_cache.pid() is None  # nobody started one
        yaml_path = host_cache.write_yaml(extra)
        operator = subprocess.Popen(
            [sys.executable, "-m", "hicache_mooncake", "host-cache", "--config", str(yaml_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        host_cache.seen.add(operator.pid)
        assert host_cache.wait_pid() == operator.pid
        deadline = time.monotonic() + 20
        while store.put_batch(["k"], [[memoryview(page)]]) != [True]:
            assert time.monotonic() < deadline, host_cache.log_tail()
            time.sleep(0.1)
        assert store.exists_prefix(["k"]) == 1
        host_cache.kill(operator.pid, signal.SIGTERM)
        assert operator.wait(10) == 0  # a clean stop
    finally:
        store.close()


def test_a_yaml_that_cannot_run_the_service_says_why_in_the_backends_log(
    host_cache: PrivateHostCache, caplog: pytest.LogCaptureFixture
) -> None:
    """``tiers.host_cache: on`` with the DRAM tier off: the service could not run this YAML (its
    arena is its DRAM tier). The backend names the setting in its own log, spawns nothing, and
    serves misses; it does not start a service that exits at once, every 50 ms, while it waits
    (before, the reason was only in the service's log, and the backend said it did not answer)."""
    extra = host_cache.extra(host_cache="on", dram={"enabled": False})
    extra["host_cache"].update({"start_timeout_s": 1.0})
    config = validate_config(extra)
    with caplog.at_level("WARNING", logger="hicache_mooncake.host_cache.keeper"):
        store = build_client_store(config, "rank0", True)
    try:
        why = [r.getMessage() for r in caplog.records if "cannot start the host cache" in r.getMessage()]
        # one attempt per backoff (the first lasts start_timeout_s), not one per 50 ms poll
        assert 1 <= len(why) <= 2 and "tiers.dram.enabled" in why[0], caplog.text
        assert host_cache.pid() is None  # nothing spawned
        assert not (host_cache.run_dir / "host-cache.log").exists()
        page = np.arange(4096, dtype=np.uint8)
        assert store.put_batch(["k"], [[memoryview(page)]]) == [False]
        assert store.exists_prefix(["k"]) == 0
    finally:
        store.close()


def test_a_node_secret_in_the_environment_does_not_lock_clients_out(
    host_cache: PrivateHostCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cluster users export HICACHE_NODE_SECRET; the service (which inherits it) answers on its Unix
    socket without a secret all the same."""
    monkeypatch.setenv("HICACHE_NODE_SECRET", "cluster-secret")
    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        page = np.arange(4096, dtype=np.uint8)
        assert store.put_batch(["s"], [[memoryview(page)]]) == [True]
        assert store.exists_prefix(["s"]) == 1
    finally:
        store.close()


def test_per_client_accounting_is_in_the_stats_and_the_metrics(host_cache: PrivateHostCache) -> None:
    import urllib.request

    from transport_procs import free_port

    port = free_port()
    host_cache.host_cache["metrics_port"] = port
    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        pages = [np.full(8192, i, dtype=np.uint8) for i in range(3)]
        assert store.put_batch(["a", "b", "c"], [[memoryview(p)] for p in pages]) == [True] * 3
        outs = [np.zeros(8192, np.uint8) for _ in range(3)]
        assert store.get_batch_into(["a", "b", "c"], [[memoryview(o)] for o in outs]) == [True] * 3
        mine = host_cache.stats()["clients"][f"pid:{os.getpid()}"]
        assert mine["committed"] == 3 and mine["reserved_bytes"] == 3 * 8192
        assert mine["lookup_hits"] == 3 and mine["lookup_hit_bytes"] == 3 * 8192
        # the service notes served hits on its placement worker, after answering: none fails
        end = time.monotonic() + 2
        while time.monotonic() < end:
            placement = host_cache.stats()["store"]["tiers"]["placement"]
            assert placement.get("bookkeeping_errors", 0) == 0
            time.sleep(0.1)
        assert placement["in_dram"] == 3
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert f'hicache_mooncake_host_cache_client_committed_total{{client="pid:{os.getpid()}"}} 3.0' in text
        assert re.search(r'hicache_mooncake:tier_entries\{[^}]*tier="dram"[^}]*\} 3\.0', text), text
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status == 200
    finally:
        store.close()


def test_the_remote_pool_lives_behind_the_service(
    host_cache: PrivateHostCache, node_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tiers.remote`` is the service's: a client's set reaches the memory node through the
    service (write-through), and the client itself holds no pool connection."""
    from transport_procs import SECRET

    from hicache_mooncake.transport import ClientOptions, NodeClient

    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)  # the service inherits it from its starter
    node = node_factory("pool")
    extra = host_cache.extra(
        host_cache="on", remote={"enabled": True, "engine": "tcp", "write_through": True}
    )
    extra["metadata"] = {
        "backend": "embedded",
        "nodes": [{"node_id": "pool", "host": "127.0.0.1", "port": node.port}],
    }
    store = build_client_store(validate_config(extra), "rank0", True)
    pool = NodeClient("127.0.0.1", node.port, ClientOptions(timeout_s=5, secret=SECRET.encode()))
    try:
        host_cache.wait_pid()
        assert [t.name for t in store.tiers] == ["host_cache"]
        pages = [np.full(8192, i, dtype=np.uint8) for i in range(3)]
        assert store.put_batch(["r0", "r1", "r2"], [[memoryview(p)] for p in pages]) == [True] * 3
        assert pool.exists_batch(["r0", "r1", "r2"]) == [True, True, True]
        assert "remote" in host_cache.stats()["store"]["tiers"]
    finally:
        pool.close()
        store.close()


def test_tenant_shares_apply_host_wide(host_cache: PrivateHostCache) -> None:
    """``tenants.shares`` hold in the service: a tenant writing past its DRAM share through one
    client has its own pages moved out, and another tenant's pages (another client) all stay."""
    extra = host_cache.extra(host_cache="on")
    extra["tenants"] = {"shares": {"team-a": {"dram": 0.25, "ssd": 0.25}}}
    config = validate_config(extra)
    writer_a = build_client_store(config, "rank0", True)
    writer_b = build_client_store(config, "rank1", True)
    try:
        host_cache.wait_pid()
        page = 64 << 10
        b_keys = [f"m/d/b{i}" for i in range(16)]  # the default tenant: 1 MiB
        b_pages = [np.full(page, i, dtype=np.uint8) for i in range(16)]
        assert all(writer_b.put_batch(b_keys, [[memoryview(p)] for p in b_pages]))
        for start in range(0, 160, 16):  # team-a: 10 MiB through an 8 MiB DRAM tier, a 2 MiB share
            keys = [f"m/d~team-a/a{i}" for i in range(start, start + 16)]
            pages = [np.full(page, i % 251, dtype=np.uint8) for i in range(start, start + 16)]
            writer_a.put_batch(keys, [[memoryview(p)] for p in pages])
        tenants = host_cache.stats()["store"]["tiers"]["tenants"]
        a = tenants["team-a"]
        assert 0 < a["dram_limit_bytes"] < 8 << 20
        assert a["dram_bytes"] <= a["dram_limit_bytes"] + 16 * page, tenants
        assert a["over_share_evicted"] + a["over_share_demoted"] > 0, tenants
        assert tenants[""]["dram_bytes"] == 16 * page, tenants  # nobody else's page moved
        outs = [np.zeros(page, np.uint8) for _ in b_keys]
        assert writer_b.get_batch_into(b_keys, [[memoryview(o)] for o in outs]) == [True] * 16
        assert all(np.array_equal(o, p) for o, p in zip(outs, b_pages, strict=True))
    finally:
        writer_a.close()
        writer_b.close()
