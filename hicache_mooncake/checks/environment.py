"""Does this host have what a configuration asks for? The SSD tier's directories, the shared
memory of the host cache's arena, and the ports, checked before anything starts.

``environment_findings(config, ranks)`` (``config validate``, ``launch``) and
``attach_findings(config, ranks)`` (the backend, at attach; ports are left to the binds that
follow, which name their key themselves) return findings naming the key to change:

- ``tiers.ssd.path`` (tier enabled): each directory must be absolute, an existing directory or
  creatable (its nearest existing ancestor is a directory), and writable: a file is really created
  and removed (root passes every permission test, ``/proc`` still refuses a file), and a missing
  directory is probed by creating and removing one in its ancestor (at attach an existing directory
  is judged by its permissions and mount flags instead: other ranks may be listing it). Errors.
- ``tiers.ssd.capacity``: each filesystem must have room for its share of ``capacity x ranks``
  (one copy with ``tiers.host_cache: on``: the host cache holds one tier for the host) plus
  ``min_free``; files already under the path (a restart's regions) count as room. An error before
  start; at attach a warning (the tier then caps itself to the disk, ``config.ssd.fit_to_disk``).
- ``host_cache.shm_dir`` (``tiers.host_cache: on``; ``auto`` gives a warning): room for the DRAM
  arena (``tiers.dram.capacity``) in that filesystem, an existing arena of the same name counting.
- ``metrics.port``, ``admin.port`` (one per rank: ``port .. port + ranks - 1``) and
  ``host_cache.metrics_port``: free on their address now (a warning: the process that holds one may
  be the same deployment's).

No check allocates or keeps anything; each is bounded (statvfs, one probe file, a listing of the
tier directories two levels deep, one bind per port).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import tempfile
from collections.abc import Iterator

from hicache_mooncake.checks.findings import Finding, Level, errors
from hicache_mooncake.config import BackendConfig, ConfigError
from hicache_mooncake.sizes import format_size

log = logging.getLogger(__name__)
MAX_LISTED = 100_000
"""At most this many entries are listed under an SSD path to count existing files."""


def environment_findings(config: BackendConfig, ranks: int) -> list[Finding]:
    """Every check of the module docstring, for ``ranks`` scheduler processes on this host."""
    return [*attach_findings(config, ranks, before_start=True), *_ports(config, ranks)]


def attach_findings(config: BackendConfig, ranks: int, before_start: bool = False) -> list[Finding]:
    """The SSD and shared-memory checks (see the module docstring; the free-space shortfall of the
    SSD is an error only ``before_start``)."""
    return [*_ssd(config, ranks, before_start), *_shm(config)]


def check_at_attach(config: BackendConfig, ranks: int) -> None:
    """The backend's attach: warnings logged; ``ConfigError`` naming each refused key (before
    anything is allocated, as the loader's refusals)."""
    findings = attach_findings(config, ranks)
    for finding in findings:
        if finding.level == "warning":
            log.warning("hicache-mooncake: %s", finding.message)
    refused = errors(findings)
    if refused:
        raise ConfigError(
            "invalid hicache-mooncake configuration for this host:\n"
            + "\n".join(f"  {finding.message}" for finding in refused)
        )


def _ssd(config: BackendConfig, ranks: int, before_start: bool) -> list[Finding]:
    ssd = config.tiers.ssd
    if not ssd.enabled:
        return []
    out: list[Finding] = []
    usable: list[str] = []
    for i, raw in enumerate(ssd.paths):
        key = "tiers.ssd.path" if isinstance(ssd.path, str) else f"tiers.ssd.path[{i}]"
        problem = _directory_problem(raw, probe_file=before_start)
        if problem:
            out.append(Finding("error", f"{key}: {raw!r} {problem}"))
        else:
            usable.append(os.path.expanduser(raw))
    if out:
        return out
    copies = 1 if config.tiers.host_cache == "on" else ranks
    share = ssd.capacity * copies // len(usable)
    by_filesystem: dict[int, list[str]] = {}
    try:
        for path in usable:
            by_filesystem.setdefault(os.stat(_existing_ancestor(path)).st_dev, []).append(path)
        spaces = [(paths, os.statvfs(_existing_ancestor(paths[0]))) for paths in by_filesystem.values()]
    except OSError as exc:
        return [Finding("error", f"tiers.ssd.path: cannot inspect its filesystem: {exc.strerror or exc}")]
    for paths, st in spaces:
        free = st.f_bavail * st.f_frsize
        need = share * len(paths) + ssd.min_free
        held = sum(_bytes_under(p) for p in paths) if free < need else 0  # a restart's regions count
        if free + held < need:
            per = f" x {copies} ranks" if copies > 1 else ""
            split = f" / {len(usable)} paths x {len(paths)} on this filesystem" if len(usable) > 1 else ""
            out.append(
                Finding(
                    "error" if before_start else "warning",
                    f"tiers.ssd.capacity: {format_size(ssd.capacity)}{per}{split} + tiers.ssd.min_free "
                    f"{format_size(ssd.min_free)} = {format_size(need)} does not fit on the filesystem of "
                    f"{', '.join(paths)}: {format_size(free)} free"
                    + (f" + {format_size(held)} already under it" if held else "")
                    + f"; lower tiers.ssd.capacity to at most "
                    f"{format_size(max(free + held - ssd.min_free, 0) * len(usable) // len(paths) // copies)}"
                    + (" per rank" if copies > 1 else "")
                    + ", or free space",
                )
            )
    return out


def _directory_problem(raw: str, probe_file: bool) -> str | None:
    """Why ``raw`` cannot be the SSD tier's directory, or None. An existing directory is probed
    with a real file when ``probe_file`` (before start), else (at attach, where other ranks' tiers
    may be listing it) by its permissions and a read-only mount."""
    path = os.path.expanduser(raw)
    if not os.path.isabs(path):
        return (
            "is relative: write an absolute path (the tier must not depend on the directory SGLang starts in)"
        )
    ancestor = _existing_ancestor(path)
    if not os.path.isdir(ancestor):
        return f"cannot be created: {ancestor} is not a directory"
    exists = ancestor == os.path.abspath(path)
    if exists and not probe_file:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        if read_only or not os.access(path, os.W_OK | os.X_OK):
            return "is not writable" + (" (a read-only filesystem)" if read_only else " by this user")
        return None
    try:
        if exists:
            fd, probe = tempfile.mkstemp(prefix=".hicache-mooncake-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".hicache-mooncake-probe-", dir=ancestor))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exists:
            return f"is not writable: creating a file in it failed ({reason})"
        return f"does not exist and cannot be created: creating a directory in {ancestor} failed ({reason})"
    return None


def _existing_ancestor(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    return p


def _bytes_under(path: str) -> int:
    """Bytes allocated to regular files up to two levels under ``path`` (the tier's rank
    directories and their regions), at most ``MAX_LISTED`` entries."""
    total = 0
    for entry in _entries(path, depth=2):
        try:
            total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue
    return total


def _entries(path: str, depth: int) -> Iterator[os.DirEntry[str]]:
    seen = 0
    stack = [(path, depth)]
    while stack:
        where, left = stack.pop()
        try:
            listing = os.scandir(where)
        except OSError:
            continue
        with listing:
            for entry in listing:
                seen += 1
                if seen > MAX_LISTED:
                    return
                if entry.is_file(follow_symlinks=False):
                    yield entry
                elif left > 1 and entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, left - 1))


def _shm(config: BackendConfig) -> list[Finding]:
    mode = config.tiers.host_cache
    dram = config.tiers.dram
    if mode == "off" or not dram.enabled:
        return []
    hc = config.host_cache
    shm_dir = os.path.expanduser(hc.shm_dir)
    try:
        st = os.statvfs(shm_dir)
    except OSError as exc:
        refusal: Level = "error" if mode == "on" else "warning"
        return [Finding(refusal, f"host_cache.shm_dir: {shm_dir} cannot be inspected: {exc.strerror or exc}")]
    free = st.f_bavail * st.f_frsize
    held = sum(e.stat().st_blocks * 512 for e in _entries(shm_dir, 1) if hc.name in e.name)
    if free + held >= dram.capacity:
        return []
    level: Level = "error" if mode == "on" else "warning"
    if mode == "on":
        when = "tiers.host_cache: on puts the DRAM tier there"
    else:
        when = "tiers.host_cache: auto puts the DRAM tier there for MLA at TP > 1"
    return [
        Finding(
            level,
            f"tiers.dram.capacity: {format_size(dram.capacity)} does not fit in host_cache.shm_dir {shm_dir} "
            f"({format_size(free + held)} free; {when}); lower tiers.dram.capacity or grow {shm_dir} "
            "(mount -o remount,size=... for a tmpfs; docker: --shm-size)",
        )
    ]


def _ports(config: BackendConfig, ranks: int) -> list[Finding]:
    wanted: list[tuple[str, str, int]] = []
    for key, host, base, count in (
        ("metrics.port", config.metrics.host, config.metrics.port, ranks),
        ("admin.port", config.admin.host, config.admin.port, ranks),
        ("host_cache.metrics_port", "127.0.0.1", config.host_cache.metrics_port, 1),
    ):
        if base:  # None: not served; 0: any free port
            wanted += [(key, host, port) for port in range(base, min(base + count, 65536))]
    out: list[Finding] = []
    for key, host, port in wanted:
        reason = _port_taken(host, port)
        if reason:
            out.append(
                Finding(
                    "warning",
                    f"{key}: port {port} on {host} {reason} (the process holding it may be this deployment's "
                    "own; otherwise pick another port, or 0 for any free one)",
                )
            )
    return out


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now, or None when it can (the probe socket is closed)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"cannot be resolved ({exc})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return (
                "is in use now"
                if exc.errno == errno.EADDRINUSE
                else f"cannot be bound ({exc.strerror or exc})"
            )
    return None
