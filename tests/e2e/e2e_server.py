"""Start and stop a real SGLang HTTP server (``python -m sglang.launch_server``) for the e2e tests.

A server runs in its own session (process group), so stopping it reaches SGLang's scheduler and
detokenizer processes too: SIGTERM to the group, SIGKILL after a deadline, then a check that no
process of the group is left. Start-up waits for ``/health`` with a deadline while watching the log:
a crashed scheduler takes about a minute to bring the server down, so the log's traceback ends the
wait early. On a CPU-only host the server gets the CPU flags and the patches of
``sglang_cpu_patches`` (on its PYTHONPATH); on a CUDA host (``HICACHE_E2E_DEVICE=cuda``) neither.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PATCHES_DIR = HERE / "sglang_cpu_patches"
DEVICE = os.environ.get("HICACHE_E2E_DEVICE", "cpu")
START_TIMEOUT_S = float(os.environ.get("HICACHE_E2E_START_TIMEOUT_S", "300"))
CRASH_MARKERS = ("Traceback (most recent call last)", "CpuPatchOutdated", "Scheduler hit an exception")

CPU_FLAGS = [
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--sampling-backend",
    "pytorch",
    "--disable-cuda-graph",
    "--dtype",
    "float32",
]
"""What SGLang's CPU path needs on a host without a GPU (and without a CPU build of sgl_kernel)."""


GPU_FLAGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch"]
"""On a GPU: backends that take the tiny model's head_dim of 16 (FlashInfer's kernels want 64+)."""


def device_flags() -> list[str]:
    return CPU_FLAGS if DEVICE == "cpu" else GPU_FLAGS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(torch_extensions_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCH_EXTENSIONS_DIR"] = str(torch_extensions_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("HICACHE_MOONCAKE_CONFIG", None)
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the server's own TMPDIR holds its cache (Server)
    if DEVICE == "cpu":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PATCHES_DIR), env.get("PYTHONPATH", "")) if p)
        env["HICACHE_E2E_CPU_PATCHES"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(extra or {})
    return env


_CLONE_NEWNET = 0x40000000
NETNS_FD: int | None = None
"""A network namespace (open fd) the e2e HTTP calls are made in (the Mooncake test runs its cluster
and server in a private one); None: this process's own."""


@contextlib.contextmanager
def _in_netns(fd: int | None) -> Iterator[None]:
    """This thread in network namespace ``fd`` (setns is per thread); sockets made inside stay there."""
    if fd is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the test's network namespace failed")
        try:
            yield
        finally:
            if libc.setns(own, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to this process's network namespace failed")
    finally:
        os.close(own)


def _enter_netns(fd: int) -> Any:
    def preexec() -> None:
        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET) failed")

    return preexec


def http(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 120.0
) -> tuple[int, Any]:
    """(status, decoded JSON or text); HTTP errors are returned, not raised."""
    with _in_netns(NETNS_FD):
        return _http(method, url, body, headers, timeout)


def _http(
    method: str, url: str, body: Any, headers: dict[str, str] | None, timeout: float
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def _semaphores() -> set[str]:
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")}
    except OSError:
        return set()


@dataclass
class Server:
    """One running server: its URL, log and the seconds it took to answer /health.

    Its processes get a temp directory of their own (``TMPDIR``: SGLang's IPC sockets, its
    prometheus multiprocess folder and torch's temp files land there), removed by ``stop``, so a
    run leaves nothing in the host's /tmp. The folder is a short path under /tmp, not pytest's
    ``tmp_path``: a unix socket path must stay under 108 bytes."""

    argv: list[str]
    port: int
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    start_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    tmpdir: Path | None = None
    semaphores_before: frozenset[str] = frozenset()
    """``sem.mp-*`` files in /dev/shm before the start (``_remove_leaked_semaphores``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, chars: int = 6000) -> str:
        return self.log()[-chars:]

    def start(self) -> Server:
        started = time.monotonic()
        self.semaphores_before = frozenset(_semaphores())
        self.tmpdir = Path(tempfile.mkdtemp(prefix="hm-e2e-", dir="/tmp"))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, "TMPDIR": str(self.tmpdir)},
                cwd=str(REPO),
                start_new_session=True,
                preexec_fn=None if NETNS_FD is None else _enter_netns(NETNS_FD),
                pass_fds=() if NETNS_FD is None else (NETNS_FD,),
            )
        deadline = started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(
                    f"server exited with {self.proc.returncode} before /health:\n{self.log_tail()}"
                )
            text = self.log()
            if any(marker in text for marker in CRASH_MARKERS):
                self.stop()
                raise RuntimeError(f"server crashed during start-up:\n{self.log_tail()}")
            try:
                status, _ = http("GET", f"{self.url}/health", timeout=5)
            except OSError:
                status = 0
            if status == 200:
                self.start_s = time.monotonic() - started
                return self
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"server did not answer /health within {START_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def group_pids(self) -> list[int]:
        """PIDs still in the server's process group (session)."""
        if self.proc is None:
            return []
        pgid = self.proc.pid
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
        return out

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``timeout_s``; raises if a process of
        the group is still alive after that. Then its temp directory is removed."""
        if self.proc is None:
            self._remove_tmpdir()
            return
        pgid = self.proc.pid
        shm = self.shm_files()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.group_pids():
            self.proc.poll()
            time.sleep(0.3)
        if self.group_pids():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            end = time.monotonic() + 10
            while time.monotonic() < end and self.group_pids():
                self.proc.poll()
                time.sleep(0.2)
        self.proc.poll()
        if self.proc.returncode is None:
            self.proc.wait(timeout=10)
        left = self.group_pids()
        if left:
            raise RuntimeError(f"processes of the server's group still alive after SIGKILL: {left}")
        for path in shm:  # SGLang leaves these behind when the server is stopped
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._remove_leaked_semaphores()
        self._remove_tmpdir()

    def _remove_leaked_semaphores(self) -> None:
        """multiprocessing's named semaphores (``sem.mp-*``) that appeared since the start and that
        no live process maps: left by the server's processes that exited before the stop (its
        spawned children's resource tracker dies with the group, so nothing unlinks them). A
        semaphore another process still has open is mapped by it, and stays."""
        new = _semaphores() - self.semaphores_before
        if not new:
            return
        mapped: set[str] = set()
        for maps in Path("/proc").glob("[0-9]*/maps"):
            try:
                text = maps.read_text()
            except OSError:
                continue
            mapped.update(name for name in new if name in text)
        for name in new - mapped:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")

    def shm_files(self) -> set[str]:
        """The files in /dev/shm that the server's live processes map and that only a server
        makes (SGLang's ``sglang_loads_*.shm``, multiprocessing's ``sem.mp-*``), for ``stop`` to
        remove once the group is gone: another process's files there (a host cache's arena) are
        never named. (Semaphores of processes that exited before the stop are not found.)"""
        out = set()
        for pid in self.group_pids():
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
            for line in maps.splitlines():
                fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
                path = fields[5] if len(fields) == 6 else ""
                if path.startswith("/dev/shm/") and path[9:].startswith(("sglang_loads_", "sem.mp-")):
                    out.add(path)
        return out

    def _remove_tmpdir(self) -> None:
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    # ---- requests -------------------------------------------------------------------------------
    def generate(self, text: str, max_new_tokens: int = 8, timeout: float = 300.0) -> dict[str, Any]:
        body = {
            "text": text,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        }
        status, reply = http("POST", f"{self.url}/generate", body, timeout=timeout)
        if status != 200 or not isinstance(reply, dict):
            raise AssertionError(f"/generate answered {status}: {reply!r}")
        return reply

    def metrics(self) -> dict[str, float]:
        """SGLang's ``/metrics`` as {name{labels}: value} (samples only)."""
        status, text = http("GET", f"{self.url}/metrics")
        assert status == 200, text
        out: dict[str, float] = {}
        for line in str(text).splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
        return out


def python() -> str:
    return sys.executable
