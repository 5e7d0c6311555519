"""Start the host cache service as a detached process, exactly once per name.

``start`` takes the service lock (``lock.try_lock``); when another process holds it the service is
running or being started, and ``start`` does nothing. Otherwise it writes the configuration
snapshot the service will run (``<name>.yaml``, 0600: the resolved YAML of this backend) and spawns
``python -m hicache_mooncake host-cache --config <snapshot> --lock-fd N`` in a new session, with
the locked descriptor inherited, then closes its own copy: the lock passes to the service with no
moment when it is free. The service's output goes to ``<name>.log``.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading

import yaml

from hicache_mooncake.config import BackendConfig

from .lock import try_lock
from .paths import HostCachePaths
from .service_config import service_config_problem

log = logging.getLogger(__name__)


def reachable(paths: HostCachePaths, timeout_s: float = 0.2) -> bool:
    """Does a service accept connections on the socket (a cheap probe, no handshake)?"""
    if not os.path.exists(paths.socket):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(paths.socket)
        except OSError:
            return False
    return True


def write_snapshot(paths: HostCachePaths, config: BackendConfig, source: str = "") -> None:
    """The service's configuration file (``authority``: what every client compares with), 0600,
    replaced atomically. ``source``: the file an operator started the service with."""
    data = config.model_dump(mode="json")
    tmp = f"{paths.config}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        origin = f"from {source}" if source else "written by the backend that started it"
        f.write(f"# the running host cache's configuration ({origin}); the service runs exactly this\n")
        yaml.safe_dump(data, f, sort_keys=False)
    os.replace(tmp, paths.config)


def service_command(config_path: str, lock_fd: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "hicache_mooncake", "host-cache", "--config", config_path]
    return cmd + (["--lock-fd", str(lock_fd)] if lock_fd is not None else [])


def start(paths: HostCachePaths, config: BackendConfig) -> int | None:
    """Spawn the service unless one runs or is starting; returns the new service's pid or None.
    ValueError, naming the setting, when the service could not run ``config`` (nothing spawned)."""
    problem = service_config_problem(config)
    if problem is not None:
        raise ValueError(f"this YAML cannot run it: {problem}")
    paths.ensure_dir()
    fd = try_lock(paths.lock)
    if fd is None:
        return None
    try:
        write_snapshot(paths, config)
        log_fd = os.open(
            paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        with os.fdopen(log_fd, "ab") as out:
            proc = subprocess.Popen(
                service_command(paths.config, fd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(fd,),
                start_new_session=True,
                close_fds=True,
            )
    finally:
        os.close(fd)
    # reap it whenever it exits (if this process outlives it), so it never lingers as a zombie
    threading.Thread(target=proc.wait, name="hicache-host-cache-reaper", daemon=True).start()
    log.info("started the host cache service (pid %d, socket %s, log %s)", proc.pid, paths.socket, paths.log)
    return proc.pid
