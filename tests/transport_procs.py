"""Real processes for the transport tests: redis-server and memory nodes, stopped by PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

SECRET = "test-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


class RedisProc:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc, signal.SIGKILL)
            self.proc = None


def node_env(secret: str | None = SECRET) -> dict[str, str]:
    """The environment of a node process: ``secret`` in $HICACHE_NODE_SECRET, or none at all."""
    env = dict(os.environ)
    env.pop("HICACHE_NODE_SECRET", None)
    if secret is not None:
        env["HICACHE_NODE_SECRET"] = secret
    return env


def node_command(cfg_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "hicache_mooncake", "node", "--config", str(cfg_path), *extra]


class NodeProc:
    """``hicache-mooncake node`` in a process. ``node`` overrides keys of its ``node:`` section;
    ``secret=None`` starts it without a shared secret; ``env`` is added to its environment (e.g.
    a simulated RDMA fabric, ``rdma_sim.Fabric.env()``)."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        redis_url: str | None,
        namespace: str,
        capacity: str = "64MiB",
        node: dict[str, object] | None = None,
        secret: str | None = SECRET,
        env: dict[str, str] | None = None,
    ) -> None:
        self.tmp, self.name = tmp, name
        self.secret = secret
        self.extra_env = env or {}
        self.cfg_path = tmp / f"{name}.yaml"
        self.ready = tmp / f"{name}.ready"
        overrides = dict(node or {})
        self.port = int(str(overrides.pop("port", free_port())))
        node_cfg: dict[str, object] = {
            "node_id": name,
            "port": self.port,
            "capacity": capacity,
            "drain_timeout_s": 2,
            **overrides,
        }
        self.shm_dir = Path(str(node_cfg.get("shm_dir", "/dev/shm")))
        cfg = {
            "node": node_cfg,
            "metadata": {
                "backend": "redis" if redis_url else "embedded",
                "url": redis_url or "redis://127.0.0.1:1/0",
                "namespace": namespace,
                "heartbeat_interval_s": 0.2,
                "heartbeat_ttl_s": 1.0,
            },
        }
        self.cfg_path.write_text(yaml.safe_dump(cfg))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / f"{name}.log"

    def start(self) -> NodeProc:
        self.ready.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                node_command(self.cfg_path, "--ready-file", str(self.ready)),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(node_env(self.secret), **self.extra_env),
            )
        deadline = time.monotonic() + 15
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node {self.name} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def arenas(self, pid: int | None = None) -> list[Path]:
        """This node's arena files in its shm directory (of process ``pid``, or of any)."""
        return sorted(self.shm_dir.glob(f"hicache-node-{self.name}-{pid if pid else '*'}-*"))

    def stop(self, sig: int = signal.SIGTERM, keep_arena: bool = False) -> int | None:
        if self.proc is None:
            return None
        pid = self.proc.pid
        _stop(self.proc, sig)
        code = self.proc.returncode
        self.proc = None
        if not keep_arena:
            # a killed node cannot unlink its shared-memory arena: do it for it
            for leftover in self.arenas(pid):
                leftover.unlink(missing_ok=True)
        return code
