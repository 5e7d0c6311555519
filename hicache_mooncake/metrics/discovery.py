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
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

APP_DIR = "hicache-mooncake"


def default_dir() -> Path:
    """``$XDG_RUNTIME_DIR/hicache-mooncake/metrics``, else ``/tmp/hicache-mooncake-<uid>/metrics``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = (
        Path(runtime) / APP_DIR
        if runtime and os.path.isdir(runtime)
        else Path(f"/tmp/{APP_DIR}-{os.geteuid()}")
    )
    return base / "metrics"


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


def private_dir(path: Path) -> None:
    """Create ``path`` (0700) if needed and check that nobody else can touch what is in it: it is
    a directory (not a link) owned by us, not writable by group or others, and every directory
    above it is owned by us or root and, when others may write it, sticky (as ``/tmp``). OSError
    naming the directory otherwise. A parent it creates (``/tmp/hicache-mooncake-<uid>``) is 0700
    too."""
    os.makedirs(path.parent, mode=0o700, exist_ok=True)
    os.makedirs(path, mode=0o700, exist_ok=True)
    uid = os.geteuid()
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path} is not a directory")
    if st.st_uid != uid:
        raise OSError(f"{path} belongs to uid {st.st_uid}, not to us")
    if st.st_mode & 0o022:
        raise OSError(f"{path} is writable by others (mode {st.st_mode & 0o777:o})")
    for parent in Path(os.path.abspath(path)).parents:
        pst = os.stat(parent)
        if pst.st_uid not in (uid, 0):
            raise OSError(f"{parent} (above {path}) belongs to uid {pst.st_uid}: others could replace {path}")
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            raise OSError(f"{parent} (above {path}) is writable by others and not sticky")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def register(directory: Path, endpoint: Endpoint, port: int) -> Path:
    """Write ``endpoint``'s file atomically (removing files of dead processes first); returns its
    path. OSError when the directory cannot be used."""
    private_dir(directory)
    for stale in _entries(directory):
        if not _alive(stale[1].pid):
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
    return [e for _path, e in _entries(directory) if _alive(e.pid)]
