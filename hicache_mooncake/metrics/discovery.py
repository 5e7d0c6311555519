"""Which processes of this host serve metrics: one small JSON file per serving process.

Every exporter (a backend rank, a memory node, any long-running service) writes
``<dir>/<role>-<pid>-<port>.json`` once it listens and removes it when it stops, so
``hicache-mooncake stats`` finds every rank of a host however its ports were chosen (``port: 0``
included). A process killed without cleanup leaves its file behind; readers skip files whose
process is gone, and the next exporter to register removes them.

The directory is private to the user (created 0700; one owned by someone else, or writable by
others, is refused), so nobody can plant an entry that points ``stats`` elsewhere. Failures to
write are reported to the caller, which serves metrics anyway (discovery is a convenience).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hicache_mooncake.runtime_dir import private_dir, runtime_dir
from hicache_mooncake.transport.processes import pid_alive


def default_dir() -> Path:
    """``$XDG_RUNTIME_DIR/hicache-mooncake/metrics``, else ``/tmp/hicache-mooncake-<uid>/metrics``."""
    return runtime_dir() / "metrics"


def resolve_dir(configured: str) -> Path:
    return Path(os.path.expanduser(configured)) if configured else default_dir()


@dataclass(frozen=True)
class Endpoint:
    """One serving process, as written to its discovery file."""

    role: str
    """``backend`` (one SGLang rank), ``node`` (a memory node), or a service's own role."""
    url: str
    """Its ``/metrics`` URL, reachable from this host."""
    pid: int
    labels: dict[str, str] = field(default_factory=dict)
    """What the process is: ``model`` and ``rank`` for a backend, ``node`` for a memory node."""

    @property
    def healthz(self) -> str:
        return self.url.rsplit("/", 1)[0] + "/healthz"


def register(directory: Path, endpoint: Endpoint, port: int) -> Path:
    """Write ``endpoint``'s file atomically (removing files of dead processes first); returns its
    path. OSError when the directory cannot be used."""
    private_dir(directory, "metrics discovery directory")
    for stale in _entries(directory):
        if not pid_alive(stale[1].pid):
            with contextlib.suppress(OSError):
                stale[0].unlink()
    path = directory / f"{endpoint.role}-{endpoint.pid}-{port}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(endpoint)))
    os.replace(tmp, path)
    return path


def unregister(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _entries(directory: Path) -> list[tuple[Path, Endpoint]]:
    out: list[tuple[Path, Endpoint]] = []
    try:
        files = sorted(directory.glob("*.json"))
    except OSError:
        return out
    for path in files:
        try:
            data: Any = json.loads(path.read_text())
            out.append(
                (
                    path,
                    Endpoint(
                        str(data["role"]),
                        str(data["url"]),
                        int(data["pid"]),
                        {str(k): str(v) for k, v in dict(data.get("labels") or {}).items()},
                    ),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half-written or foreign: not an endpoint
    return out


def endpoints(directory: Path) -> list[Endpoint]:
    """The live endpoints registered in ``directory`` (none when it does not exist)."""
    return [e for _path, e in _entries(directory) if pid_alive(e.pid)]
