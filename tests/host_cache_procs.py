"""A private host cache for a test: its own socket directory, shm directory and SSD directory (never a
preset's shared paths), the YAML that names them, and the service processes it started, found by
the pid in the service lock and stopped by that PID."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from hicache_mooncake.host_cache.lock import holder_pid
from hicache_mooncake.transport.node_client import NodeClient
from hicache_mooncake.transport.options import ClientOptions
from hicache_mooncake.transport.processes import pid_alive

REPO = Path(__file__).resolve().parent.parent


def service_pids(config_marker: str) -> list[int]:
    """Live ``hicache-mooncake host-cache`` processes whose command line names ``config_marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"host-cache" in argv and any(config_marker.encode() in a for a in argv) and pid_alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def stop_services_under(directory: Path, timeout: float = 10.0) -> list[int]:
    """Stop every host cache service whose lock lies under ``directory`` (the pid its lock names,
    checked to be a ``host-cache`` process): SIGTERM, then SIGKILL. Returns the pids stopped."""
    stopped = []
    for lock in sorted(directory.rglob("*.lock")):
        pid = holder_pid(str(lock))
        if pid is None or pid not in service_pids("host-cache"):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        stopped.append(pid)
    return stopped


class PrivateHostCache:
    def __init__(self, tmp: Path, **host_cache: Any) -> None:
        self.tmp = tmp
        self.run_dir = tmp / "run"
        self.ssd_dir = tmp / "ssd"
        self.shm_dir = Path(tempfile.mkdtemp(prefix="hicache-test-hc-", dir="/dev/shm"))
        self.host_cache = {
            "dir": str(self.run_dir),
            "shm_dir": str(self.shm_dir),
            "retry_interval_s": 0.2,
            "start_timeout_s": 30,
            "idle_timeout_s": 120,
            **host_cache,
        }
        self.seen: set[int] = set()

    def extra(self, base: dict[str, Any] | None = None, **tiers: Any) -> dict[str, Any]:
        """``base`` (default: the shipped default preset) with this cache's private paths and
        test-sized tiers; ``tiers`` overrides keys of ``tiers``."""
        if base is None:
            base = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())
        extra = copy.deepcopy(base)
        t = extra.setdefault("tiers", {})
        t.setdefault("dram", {}).update({"capacity": "8MiB", "slab_size": "1MiB"})
        t.setdefault("ssd", {}).update(
            {"path": str(self.ssd_dir), "capacity": "32MiB", "region_size": "1MiB", "min_free": 0}
        )
        for name, value in tiers.items():
            if isinstance(value, dict):
                t.setdefault(name, {}).update(value)
            else:
                t[name] = value
        extra["host_cache"] = {**extra.get("host_cache", {}), **self.host_cache}
        return extra

    def write_yaml(self, extra: dict[str, Any], name: str = "hc.yaml") -> Path:
        path = self.tmp / name
        path.write_text(yaml.safe_dump(extra))
        return path

    @property
    def socket(self) -> Path:
        return self.run_dir / "host-cache.sock"

    @property
    def lock(self) -> Path:
        return self.run_dir / "host-cache.lock"

    def pid(self) -> int | None:
        """The running service's pid (from its lock), remembered for the teardown."""
        pid = holder_pid(str(self.lock))
        if pid is not None:
            self.seen.add(pid)
        return pid

    def wait_pid(self, timeout: float = 30.0, other_than: int | None = None) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.pid()
            if pid is not None and pid != other_than and pid_alive(pid) and self.socket.exists():
                return pid
            time.sleep(0.05)
        raise AssertionError(f"no host cache service came up: {self.log_tail()}")

    def stats(self) -> dict[str, Any]:
        client = NodeClient(f"unix:{self.socket}", 0, ClientOptions(timeout_s=5), "tcp")
        try:
            node: dict[str, Any] = client.stats()["node"]
            return node
        finally:
            client.close()

    def log_tail(self) -> str:
        log = self.run_dir / "host-cache.log"
        return log.read_text()[-3000:] if log.exists() else "(no service log)"

    def kill(self, pid: int, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        self.seen.add(pid)
        if not pid_alive(pid):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # it ended between the check and the signal (a service stopping)
            return
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop_all(self) -> None:
        """Stop every service this cache ever had, by PID (SIGTERM, then SIGKILL)."""
        self.pid()
        for pid in sorted(self.seen):
            if pid_alive(pid):
                self.kill(pid, signal.SIGTERM)
        shutil.rmtree(self.shm_dir, ignore_errors=True)

    def dump(self) -> str:
        return json.dumps(self.host_cache)
