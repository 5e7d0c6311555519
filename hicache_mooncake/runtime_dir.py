"""This user's runtime directory: where hicache-mooncake's processes keep their small files
(host cache sockets and locks, metrics and admin discovery files, the admin token).

One directory per user, private to it: ``runtime_dir()`` says where, ``private_dir`` creates a
directory below it and refuses one that another local user could read into or swap (the rules
are ``hicache_mooncake.ssd.private_dir``'s, plus every directory above owned by us or root).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

APP_DIR = "hicache-mooncake"


def runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/hicache-mooncake`` when ``XDG_RUNTIME_DIR`` names an existing directory,
    else ``/tmp/hicache-mooncake-<euid>``. Nothing is created here (``private_dir`` does)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / APP_DIR
    return Path(f"/tmp/{APP_DIR}-{os.geteuid()}")


def private_dir(path: Path, what: str = "") -> None:
    """Create ``path`` 0700 (a missing parent too, as ``/tmp/hicache-mooncake-<uid>``) and check
    that nobody else can touch what is in it: a directory owned by us, not writable by group or
    others (``ssd.private_dir.check_dir``), and every directory above it owned by us or root and,
    when others may write it, sticky (as ``/tmp``). ``OSError`` naming the directory otherwise;
    ``what`` names the setting in the message (default: the path)."""
    # imported here: ``hicache_mooncake.ssd`` loads the SSD engine, which the light readers of
    # ``runtime_dir`` (the config, ``hicache-mooncake stats``) never need
    from hicache_mooncake.ssd.private_dir import SsdUnsafePathError, make_private_dir

    what = what or str(path)
    os.makedirs(path.parent, mode=0o700, exist_ok=True)
    try:
        make_private_dir(str(path), what)
    except SsdUnsafePathError as exc:
        raise OSError(str(exc)) from None
    uid = os.geteuid()
    for parent in Path(os.path.abspath(path)).parents:
        pst = os.stat(parent)
        if pst.st_uid not in (uid, 0):
            raise OSError(f"{parent} (above {path}) belongs to uid {pst.st_uid}: others could replace {path}")
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            raise OSError(f"{parent} (above {path}) is writable by others and not sticky")
