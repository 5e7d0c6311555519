"""What runs as the host cache, and stopping it: ``hicache-mooncake host-cache status|stop``.

The service writes ``<dir>/<name>.status.json`` (0600, replaced atomically) once it serves: its
pid, when it started, the configuration file it runs, its metrics URL. ``service_status`` joins it
with the lock's holder (the authority on whether one runs: a status file whose pid does not hold
the lock is stale) and the service's own stats over its socket (tiers, capacities, clients), and
names each client process from the metrics discovery directory (a rank registers its pid there).

``stop_service`` sends SIGTERM to the lock's holder (only when its command line is a host cache
service) and waits, at most ``timeout_s``, for it to exit and free the lock: it drains (in-flight
requests finish, DRAM pages the SSD lacks are flushed within ``tiers.ssd.flush_on_detach_s``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.sizes import format_size
from hicache_mooncake.transport.processes import pid_alive

from .lock import holder_pid
from .paths import HostCachePaths


def status_path(paths: HostCachePaths) -> str:
    return os.path.join(paths.dir, f"{paths.name}.status.json")


def metrics_url(host: str, port: int | None) -> str:
    """The URL a process of this host reads the service's ``/metrics`` at (as discovery writes it)."""
    if port is None:
        return ""
    where = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://[{where}]:{port}/metrics" if ":" in where else f"http://{where}:{port}/metrics"


def write_status(paths: HostCachePaths, config_file: str, metrics_url: str) -> None:
    data = {
        "pid": os.getpid(),
        "started": time.time(),
        "config_file": os.path.abspath(config_file) if config_file else paths.config,
        "socket": paths.socket,
        "metrics_url": metrics_url,
    }
    tmp = f"{status_path(paths)}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, status_path(paths))


def remove_status(paths: HostCachePaths) -> None:
    """Remove the status file if it is this process's."""
    if (read_status(paths) or {}).get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            os.unlink(status_path(paths))


def read_status(paths: HostCachePaths) -> dict[str, Any] | None:
    try:
        with open(status_path(paths)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_service(pid: int) -> bool:
    """Whether ``pid`` runs ``hicache-mooncake host-cache`` (its command line says so)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"host-cache" in argv


@dataclass
class ServiceStatus:
    name: str
    socket: str
    running: bool
    pid: int | None = None
    started: float | None = None
    uptime_s: float | None = None
    config_file: str = ""
    metrics_url: str = ""
    answers: bool = False
    """Whether the service answered over its socket (its tiers and clients are known)."""
    tiers: dict[str, dict[str, Any]] = field(default_factory=dict)
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _client_names(config: BackendConfig) -> dict[int, dict[str, str]]:
    from hicache_mooncake.metrics import discovery as metrics_discovery

    directory = metrics_discovery.resolve_dir(config.metrics.discovery_dir)
    return {e.pid: e.labels for e in metrics_discovery.endpoints(directory) if e.role == "backend"}


def service_status(config: BackendConfig, timeout_s: float = 3.0) -> ServiceStatus:
    paths = HostCachePaths.of(config.host_cache)
    pid = holder_pid(paths.lock)
    out = ServiceStatus(paths.name, paths.socket, pid is not None, pid)
    if pid is None:
        return out
    status = read_status(paths) or {}
    if status.get("pid") == pid:
        out.started = float(status["started"])
        out.uptime_s = max(0.0, time.time() - out.started)
        out.config_file = str(status.get("config_file", ""))
        out.metrics_url = str(status.get("metrics_url", ""))
    from hicache_mooncake.transport.node_client import NodeClient

    from .client import client_options

    options = dataclasses.replace(client_options(config), timeout_s=timeout_s)
    client = NodeClient(f"unix:{paths.socket}", 0, options, "tcp")
    try:
        stats = client.stats()
    finally:
        client.close()
    if not stats.get("reachable"):
        return out
    node = stats["node"]
    out.answers = True
    store = node.get("store") or {}
    tiers = store.get("tiers") if isinstance(store.get("tiers"), dict) else {}
    for name, t in (tiers or {}).items():
        if isinstance(t, dict) and "tier" in t:
            out.tiers[name] = {
                k: t[k]
                for k in ("entries", "used_bytes", "capacity_bytes", "degraded", "degraded_reason")
                if k in t
            }
    names = _client_names(config)
    for client_id, counts in (node.get("clients") or {}).items():
        if client_id == f"pid:{os.getpid()}":
            continue  # this query's own connection
        entry: dict[str, Any] = dict(counts)
        if client_id.startswith("pid:") and client_id[4:].isdigit():
            labels = names.get(int(client_id[4:]))
            if labels:
                entry["rank"] = labels.get("rank", "")
                entry["model"] = labels.get("model", "")
        out.clients[client_id] = entry
    return out


def _duration(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 86400}d{s % 86400 // 3600:02d}h"
        if s >= 86400
        else f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"
    )


def format_status(st: ServiceStatus) -> str:
    if not st.running:
        return f"host cache {st.name}: not running (socket {st.socket})"
    lines = [f"host cache {st.name}: running, pid {st.pid}, socket {st.socket}"]
    if st.started is not None and st.uptime_s is not None:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.started))
        lines.append(f"  since {since} (up {_duration(st.uptime_s)}), config {st.config_file or '-'}")
    if st.metrics_url:
        lines.append(f"  metrics {st.metrics_url}")
    if not st.answers:
        lines.append("  it does not answer on its socket (starting, draining, or stuck)")
        return "\n".join(lines)
    for name, t in st.tiers.items():
        flag = f"  DEGRADED: {t.get('degraded_reason') or 'yes'}" if t.get("degraded") else ""
        lines.append(
            f"  tier {name:8s} {int(t.get('entries', 0)):>9d} entries, {format_size(t.get('used_bytes', 0))} of "
            f"{format_size(t.get('capacity_bytes', 0))}{flag}"
        )
    lines.append(f"  clients attached: {len(st.clients)}")
    for client, c in sorted(st.clients.items()):
        who = f" (rank {c['rank']} of {c.get('model') or '-'})" if c.get("rank") else ""
        lines.append(
            f"    {client}{who}: {int(c.get('connections', 0))} connection(s), {int(c.get('requests', 0))} requests, "
            f"{int(c.get('lookup_hits', 0))}/{int(c.get('lookups', 0))} lookups hit, {int(c.get('committed', 0))} stored"
        )
    return "\n".join(lines)


def stop_service(paths: HostCachePaths, timeout_s: float) -> tuple[bool, str]:
    """(stopped, what happened). Not running counts as stopped."""
    pid = holder_pid(paths.lock)
    if pid is None:
        return True, f"host cache {paths.name}: not running"
    if not is_service(pid):
        return (
            False,
            f"host cache {paths.name}: the lock {paths.lock} names pid {pid}, which is not a host cache service",
        )
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True, f"host cache {paths.name}: pid {pid} already exited"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if holder_pid(paths.lock) != pid and not pid_alive(pid):
            return True, f"host cache {paths.name}: pid {pid} drained and stopped"
        time.sleep(0.05)
    return False, (
        f"host cache {paths.name}: pid {pid} still runs {timeout_s:.0f} s after SIGTERM (draining or stuck; "
        f"its log: {paths.log})"
    )
