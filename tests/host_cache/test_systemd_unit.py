"""The shipped systemd unit (``configs/hicache-mooncake-host-cache.service``) is valid for systemd
(``systemd-analyze verify``) and does what it says when a service manager runs it.

No systemd runs in CI (no PID 1 systemd, no user manager), so the second test is the service
manager: it reads the unit's ``[Service]`` section and runs its ``ExecStart`` as systemd would
(``Type=simple``: the process is the service; ``RuntimeDirectory=`` made with its mode before the
start, here under a private root instead of ``/run``; ``LimitNOFILE=``; the environment systemd
gives, with the package's console script on ``PATH``), with the YAML the unit's comment tells
operators to write, only its path changed. It checks that the service serves, that ``KillSignal``
stops it within ``TimeoutStopSec`` with exit status 0 (so ``Restart=on-failure`` does not restart
a clean stop), and that the data of the stopped service is found by the next start. ``User=`` is
not applied (the test runs as its own user; the unit must name a user that is not root)."""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from host_cache_procs import REPO, PrivateHostCache

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration
UNIT = REPO / "configs" / "hicache-mooncake-host-cache.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values]}}`` of a unit file (comments and blank lines skipped)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"a key outside any section: {line!r}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def seconds(value: str) -> float:
    return float(value[:-1]) if value.endswith("s") else float(value)


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/dev.sh setup installs the systemd package"
    unit = tmp_path / UNIT.name
    shutil.copy(UNIT, unit)
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert UNIT.name not in result.stderr, result.stderr  # no warning about the unit itself


def test_the_unit_starts_serves_and_stops_as_a_service_manager_runs_it(
    host_cache: PrivateHostCache, request: pytest.FixtureRequest
) -> None:
    unit = parse_unit(UNIT.read_text())
    svc = unit["Service"]
    assert svc["Type"] == ["simple"] and svc["KillSignal"] == ["SIGTERM"] and svc["Restart"] == ["on-failure"]
    assert svc["User"][0] not in ("", "root")
    argv = shlex.split(svc["ExecStart"][0])
    config_at = argv.index("--config") + 1
    # the runtime directory, as systemd makes it (its root stands for /run)
    root = Path(tempfile.mkdtemp(prefix="hc-run-"))  # short: a socket path has at most 107 bytes
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    runtime = root / svc["RuntimeDirectory"][0]
    runtime.mkdir(parents=True, mode=int(svc["RuntimeDirectoryMode"][0], 8))
    # the YAML the unit's comment prescribes: the runtime directory, no autostart, no idle stop
    host_cache.run_dir = runtime
    host_cache.host_cache.update({"dir": str(runtime), "autostart": False, "idle_timeout_s": 0})
    extra = host_cache.extra()
    extra["metrics"] = {**extra.get("metrics", {}), "discovery_dir": str(host_cache.tmp / "discovery")}
    argv[config_at] = str(host_cache.write_yaml(extra, "hicache.yaml"))
    # LimitNOFILE=, as far as this container's hard limit allows (systemd, as root, raises it)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = (
        int(svc["LimitNOFILE"][0])
        if hard == resource.RLIM_INFINITY
        else min(int(svc["LimitNOFILE"][0]), hard)
    )
    stop_within = seconds(svc["TimeoutStopSec"][0])
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(host_cache.tmp),
    }
    if "PYTHONPATH" in os.environ:  # the test runner's own import path, if it has one
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=(host_cache.tmp / "journal.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard)),
        )
        host_cache.seen.add(proc.pid)
        deadline = time.monotonic() + 60
        while not (host_cache.pid() == proc.pid and host_cache.socket.exists()):
            assert proc.poll() is None and time.monotonic() < deadline, journal()
            time.sleep(0.05)
        return proc

    def stop(proc: subprocess.Popen[bytes]) -> int:
        began = time.monotonic()
        proc.send_signal(getattr(signal, svc["KillSignal"][0]))
        rc = proc.wait(timeout=stop_within + 5)
        assert time.monotonic() - began < stop_within
        return rc

    def journal() -> str:
        return (host_cache.tmp / "journal.log").read_text()[-3000:]

    config = validate_config(extra)
    page = np.full(8192, 5, dtype=np.uint8)
    proc = start()
    try:
        store = build_client_store(config, "rank0", True)
        try:
            assert store.put_batch(["unit"], [[memoryview(page)]]) == [True]
        finally:
            store.close()
        assert stop(proc) == 0, journal()  # a clean stop: Restart=on-failure leaves it stopped
        assert not host_cache.socket.exists() and host_cache.pid() is None
        proc = start()  # `systemctl start` again: the SSD tier has the page flushed at the stop
        store = build_client_store(config, "rank0", True)
        try:
            out = np.zeros(8192, np.uint8)
            assert store.get_batch_into(["unit"], [[memoryview(out)]]) == [True], journal()
            assert out[0] == 5
        finally:
            store.close()
        assert stop(proc) == 0, journal()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
