"""Who configures the host's cache: the rule, stated once.

The host cache service runs exactly one configuration: its file, ``<dir>/<name>.yaml`` (0600 in
the private runtime directory). The backend that starts the service writes it (its own resolved
YAML) before spawning it; a service started by an operator (``hicache-mooncake host-cache --config
FILE``, systemd) writes the FILE it runs there at start. Whatever started it, that file IS the
service's configuration until the service exits; clients never change it.

A client's own YAML decides only whether it joins (``tiers.host_cache``) and its keys (``namespace``:
keys are built by each client, so the namespace is never the service's). At attach the client
compares the keys the service serves (``served_differences``: ``tiers.*`` except ``host_cache``,
the remote pool's ``metadata``, ``tenants``) with the service's file and logs one line per key
that differs, with both values. Then:

- ``tiers.host_cache: on``: joins; the lines say what it got instead of what it asked for;
- ``tiers.host_cache: auto``: joins only when the service agrees on the remote provider
  (``tiers.remote.enabled``, ``.provider``) and the SSD path (``tiers.ssd.enabled``, ``.path``:
  ``BLOCKING_KEYS``); otherwise it keeps its tiers in-process and says why. One exception: an MLA
  model at TP > 1 without a remote pool needs a tier its ranks share, so it joins anyway and says
  what it got. A service whose file cannot be read counts as disagreeing;
- ``hicache-mooncake config validate --against-running FILE`` prints the same lines offline.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from hicache_mooncake.config import BackendConfig, ConfigError, validate_config
from hicache_mooncake.sizes import format_size

from .launcher import reachable
from .lock import holder_pid
from .paths import HostCachePaths

log = logging.getLogger(__name__)

BLOCKING_KEYS = ("tiers.remote.enabled", "tiers.remote.provider", "tiers.ssd.enabled", "tiers.ssd.path")
"""Keys on which ``auto`` must agree with the running service to join it."""


@dataclass(frozen=True)
class Difference:
    key: str
    client: Any
    service: Any

    @property
    def blocking(self) -> bool:
        return self.key in BLOCKING_KEYS

    def line(self) -> str:
        mine, theirs = _shown(self.key, self.client), _shown(self.key, self.service)
        return f"{self.key}: this process's YAML says {mine}, the running host cache serves {theirs}"


def _shown(key: str, value: Any) -> str:
    """A value as the log line shows it: sizes as sizes (and in bytes), the rest as Python repr."""
    name = key.rsplit(".", 1)[-1]
    if isinstance(value, int) and not isinstance(value, bool) and name in _SIZE_KEYS:
        return f"{format_size(value)} ({value})"
    return repr(value)


_SIZE_KEYS = frozenset({"capacity", "max_capacity", "slab_size", "region_size", "min_free"})


def _served(config: BackendConfig) -> dict[str, Any]:
    """The sections the service serves, as plain data (sizes in bytes)."""
    data = config.model_dump(mode="json")
    tiers = dict(data["tiers"])
    tiers.pop("host_cache", None)
    # one spelling of the SSD path: a string and a one-entry list, ``~`` and ``$HOME``, are the same
    tiers["ssd"] = {**tiers["ssd"], "path": [os.path.expanduser(p) for p in config.tiers.ssd.paths]}
    served: dict[str, Any] = {"tiers": tiers, "tenants": data["tenants"]}
    if config.tiers.remote.enabled:
        served["metadata"] = data["metadata"]
    return served


def _walk(a: Any, b: Any, prefix: str) -> Iterator[Difference]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if "enabled" in a and "enabled" in b and not (a["enabled"] or b["enabled"]):
            return  # off on both sides: its settings serve nothing
        if "enabled" in a and "enabled" in b and a["enabled"] != b["enabled"]:
            yield Difference(f"{prefix}.enabled", a["enabled"], b["enabled"])
            if "provider" in a and a.get("provider") != b.get("provider"):
                yield Difference(f"{prefix}.provider", a.get("provider"), b.get("provider"))
            return  # one side off: its other settings say nothing more
        for name in list(a) + [k for k in b if k not in a]:
            yield from _walk(a.get(name), b.get(name), f"{prefix}.{name}" if prefix else str(name))
    elif a != b:
        yield Difference(prefix, a, b)


def served_differences(client: BackendConfig, service: BackendConfig) -> list[Difference]:
    """Every served key whose value differs, in YAML order (``paths`` of the SSD as one key)."""
    return list(_walk(_served(client), _served(service), ""))


@dataclass(frozen=True)
class RunningService:
    paths: HostCachePaths
    pid: int | None
    config: BackendConfig | None
    problem: str = ""
    """Why ``config`` is None (the file is missing or unreadable)."""


def running_service(paths: HostCachePaths) -> RunningService | None:
    """The service that answers on ``paths`` and its configuration file; None when none runs."""
    if not reachable(paths):
        return None
    pid = holder_pid(paths.lock)
    try:
        with open(paths.config, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        if not isinstance(data, dict):
            raise ConfigError(f"{paths.config}: not a YAML mapping")
        return RunningService(paths, pid, validate_config(data, paths.config))
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        return RunningService(paths, pid, None, f"cannot read its configuration {paths.config}: {exc}")


@dataclass(frozen=True)
class JoinDecision:
    join: bool
    why: str
    differences: tuple[Difference, ...] = ()


def decide_auto(config: BackendConfig, running: RunningService, needs_shared: bool) -> JoinDecision:
    """``auto`` next to a running service (module docstring). ``needs_shared``: MLA at TP > 1."""
    where = (
        f"the host cache at {running.paths.socket} (pid {running.pid}, configuration {running.paths.config})"
    )
    if running.config is None:
        if needs_shared and not config.tiers.remote.enabled:
            return JoinDecision(
                True, f"tiers.host_cache: auto (joined {where}: MLA ranks must share; {running.problem})"
            )
        return JoinDecision(
            False, f"tiers.host_cache: auto (in-process tiers: {where} runs, but {running.problem})"
        )
    diffs = tuple(served_differences(config, running.config))
    blocking = [d for d in diffs if d.blocking]
    if not blocking:
        return JoinDecision(True, f"tiers.host_cache: auto (joined {where})", diffs)
    keys = ", ".join(d.key for d in blocking)
    if needs_shared and not config.tiers.remote.enabled:
        return JoinDecision(
            True,
            f"tiers.host_cache: auto (joined {where} although it serves other {keys}: MLA ranks must share)",
            diffs,
        )
    return JoinDecision(
        False,
        f"tiers.host_cache: auto (in-process tiers: {where} serves other {keys} than this YAML; set "
        "tiers.host_cache: on to use it as it is, or give this process its own host_cache.name)",
        diffs,
    )


def log_differences(differences: tuple[Difference, ...] | list[Difference], joined: bool) -> None:
    """One log line per differing key, both values (a warning when this process joined)."""
    level = logging.WARNING if joined else logging.INFO
    for diff in differences:
        log.log(level, "host cache: %s%s", diff.line(), "" if joined else " (not joined)")


def report_against_running(config: BackendConfig) -> list[str]:
    """``config validate --against-running``: what this YAML gets from the running service."""
    paths = HostCachePaths.of(config.host_cache)
    running = running_service(paths)
    if running is None:
        return [
            f"host cache: none runs at {paths.socket}: the first process to need one starts it from its own YAML"
        ]
    if running.config is None:
        return [f"host cache: pid {running.pid} runs at {paths.socket}; {running.problem}"]
    diffs = served_differences(config, running.config)
    lines = [f"host cache: {d.line()}" for d in diffs]
    mode = config.tiers.host_cache
    if mode == "auto":
        verdict = decide_auto(config, running, needs_shared=False).why
        lines.append(f"host cache: as a TP1 or MHA process: {verdict}")
    elif mode == "on":
        lines.append(f"host cache: tiers.host_cache: on joins {paths.socket} (pid {running.pid}) as it is")
    if not diffs:
        lines.insert(0, f"host cache: pid {running.pid} at {paths.socket} serves exactly this YAML's tiers")
    return lines
