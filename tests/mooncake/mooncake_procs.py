"""Real Mooncake processes for the tests, all inside ONE private network namespace.

Mooncake's Transfer Engine listens on every interface (its P2P handshake and TCP data ports bind
0.0.0.0 / [::] whatever it is told), and so would the master's HTTP metadata server; the tests
must bind loopback only. So every process of a cluster (master, segment holders, etcd, the
SGLang-side client agents) runs in a network namespace that has nothing but ``lo``: an *anchor*
process made by ``unshare -n`` holds it, the others enter it with ``setns`` before ``exec``.
The test process stays outside and talks to the agents over pipes. Every process is stopped by
PID (and gets ``PR_SET_PDEATHSIG``, so none outlives the test process); the namespace goes with
the last of them. Ports are fixed: nothing else lives in the namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
MASTER_PORT = 50051
RESERVED_PORTS = "50050-50070,51050-51070"  # masters (+1000: metrics) and holders


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _enter(netns_fd: int) -> Callable[[], None]:
    def preexec() -> None:
        libc = _libc()
        if libc.setns(netns_fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET) failed")
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return preexec


def stop_pid(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


class Netns:
    """The anchor: ``unshare -n`` + ``lo`` up, alive until ``close``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        # the fixed ports the tests bind (masters, their metrics ports, holders) lie in the kernel's
        # ephemeral range: reserved in this namespace, no outgoing connection can take one first
        # (a standby master once failed with "Address already in use" on its metrics port)
        code = (
            "import subprocess, sys; subprocess.run(['ip', 'link', 'set', 'lo', 'up'], check=True); "
            f"open('/proc/sys/net/ipv4/ip_local_reserved_ports', 'w').write({RESERVED_PORTS!r}); "
            "print('up', flush=True); sys.stdin.read()"
        )
        self.anchor = subprocess.Popen(
            [shutil.which("unshare") or "unshare", "-n", "--", sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0),
        )
        assert self.anchor.stdout is not None
        if self.anchor.stdout.readline().strip() != "up":
            raise RuntimeError("could not make a private network namespace (unshare -n needs root)")
        self.fd = os.open(f"/proc/{self.anchor.pid}/ns/net", os.O_RDONLY)
        self.started: list[subprocess.Popen[Any]] = []

    def popen(self, cmd: list[str], log: Path | None = None, **kw: Any) -> subprocess.Popen[Any]:
        if log is not None:
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    cmd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_enter(self.fd),
                    pass_fds=(self.fd,),
                    **kw,
                )
        else:
            proc = subprocess.Popen(cmd, preexec_fn=_enter(self.fd), pass_fds=(self.fd,), **kw)
        self.started.append(proc)
        return proc

    def run(self, cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cmd,
            preexec_fn=_enter(self.fd),
            pass_fds=(self.fd,),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def wait_port(self, port: int, proc: subprocess.Popen[Any], what: str, timeout: float = 30) -> None:
        """Until something listens on 127.0.0.1:``port`` inside the namespace."""
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=0.5).close()"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}")
            if self.run([sys.executable, "-c", probe]).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f} s")

    def close(self) -> None:
        for proc in reversed(self.started):
            stop_pid(proc, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if self.anchor.stdin is not None:
            self.anchor.stdin.close()
        stop_pid(self.anchor)


class Master:
    """``mooncake_master`` on loopback, without the HTTP metadata server (clients use P2P)."""

    def __init__(
        self, ns: Netns, port: int = MASTER_PORT, extra: list[str] | None = None, name: str = "master"
    ):
        self.ns, self.port, self.name = ns, port, name
        self.flags = [
            "--rpc_address=127.0.0.1",
            f"--rpc_port={port}",
            "--metrics_host=127.0.0.1",
            f"--metrics_port={port + 1000}",
            "--client_ttl=2",  # a killed segment holder is dropped after 2 s
            "--default_kv_lease_ttl=1000",
            *(extra or []),
        ]
        self.proc: subprocess.Popen[Any] | None = None
        self.log = ns.tmp / f"{name}.log"

    def start(self, listen: bool = True) -> Master:
        """Start; with ``listen`` wait for the RPC port (an HA standby opens it only when elected)."""
        self.proc = self.ns.popen([str(BIN / "mooncake_master"), *self.flags], self.log)
        if listen:
            self.ns.wait_port(self.port, self.proc, self.name)
        return self

    def wait_role(self, state: str, timeout: float = 60) -> None:
        """HA: until the master's log says its runtime state became ``state`` (e.g. ``serving``
        for the elected leader after its warm-up, ``standby`` for a follower)."""
        proc = self.proc
        assert proc is not None

        def reached() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            return f"runtime state -> {state}" in self.log.read_text(errors="replace")

        if not wait_until(reached, timeout, 0.2):
            raise RuntimeError(f"{self.name} did not reach {state!r} within {timeout:.0f} s")

    def segments(self) -> list[str]:
        """The segments this master has mounted now (its HTTP ``/get_all_segments``, asked from
        inside the namespace); empty while it does not answer."""
        url = f"http://127.0.0.1:{self.port + 1000}/get_all_segments"
        code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=2).read().decode())"
        out = self.ns.run([sys.executable, "-c", code], timeout=10)
        return out.stdout.split() if out.returncode == 0 else []

    def kill(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc, signal.SIGKILL)
            self.proc = None


class Holder:
    """A segment holder: Mooncake's own ``mooncake_client`` contributing a DRAM segment."""

    def __init__(self, ns: Netns, name: str, port: int, master: str, segment: str = "64MB") -> None:
        self.ns, self.name, self.port = ns, name, port
        self.cmd = [
            str(BIN / "mooncake_client"),
            "--host=127.0.0.1",
            f"--port={port}",
            f"--master_server_address={master}",
            "--metadata_server=P2PHANDSHAKE",
            f"--global_segment_size={segment}",
        ]
        self.proc: subprocess.Popen[Any] | None = None
        self.log = ns.tmp / f"{name}.log"

    def start(self) -> Holder:
        self.proc = self.ns.popen(self.cmd, self.log)
        self.ns.wait_port(self.port, self.proc, self.name)
        return self

    def kill(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc, signal.SIGKILL)
            self.proc = None


class Etcd:
    """A one-member etcd (Debian's etcd-server) for the masters' leader election."""

    def __init__(self, ns: Netns, port: int = 2379) -> None:
        self.ns, self.port = ns, port
        self.data = Path(tempfile.mkdtemp(prefix="etcd-", dir=ns.tmp))
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> Etcd:
        exe = shutil.which("etcd")
        if exe is None:
            raise RuntimeError("etcd is not installed (apt-get install etcd-server; scripts/dev.sh does)")
        peer = f"http://127.0.0.1:{self.port + 1}"
        self.proc = self.ns.popen(
            [
                exe,
                "--data-dir",
                str(self.data),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.port}",
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"default={peer}",
            ],  # fmt: skip
            self.ns.tmp / "etcd.log",
        )
        self.ns.wait_port(self.port, self.proc, "etcd")
        return self


class Agent:
    """One SGLang-side client process (``client_agent.py``): its own backend, built by SGLang's
    factory from ``extra``; one JSON command per line on stdin, one JSON answer per line."""

    def __init__(self, ns: Netns, name: str, extra: dict[str, Any]) -> None:
        self.name = name
        self.err = ns.tmp / f"{name}.log"
        self._err_file = self.err.open("ab")
        self.proc = ns.popen(
            [sys.executable, str(HERE / "client_agent.py"), json.dumps(extra), str(ns.tmp)],
            None,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err_file,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "ping"}) + "\n")  # answered once SGLang is up
        self.proc.stdin.flush()
        self.ready: dict[str, Any] | None = None

    def wait_ready(self, timeout: float = 300) -> Agent:
        """The answer to the ``ping`` sent at start (agents import SGLang in parallel meanwhile)."""
        if self.ready is None:
            self.ready = self._answer(timeout)
        return self

    def call(self, cmd: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        """Send one command, wait for its answer (the agent is killed past ``timeout``)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wait_ready()
        with self._lock:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            return self._answer(timeout)

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        timer = threading.Timer(timeout, lambda: self.proc.poll() is None and os.kill(self.proc.pid, 9))
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line:
            raise RuntimeError(f"agent {self.name} died; log tail: {self.err.read_text()[-3000:]}")
        answer: dict[str, Any] = json.loads(line)
        if "fatal" in answer:
            raise RuntimeError(f"agent {self.name}: {answer['fatal']}")
        return answer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(30)
        stop_pid(self.proc)
        self._err_file.close()


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()
