"""Where a named host cache lives: ``<dir>/<name>.sock``, ``.lock``, ``.log`` and ``.yaml``.

The directory is private to the user: created 0700, and refused (``ValueError`` naming the key)
when another user owns it or others may write into it, so nobody can plant a socket or a lock
file for our processes to trust.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from hicache_mooncake.config.host_cache import HostCacheConfig


@dataclass(frozen=True)
class HostCachePaths:
    dir: str
    name: str

    @classmethod
    def of(cls, cfg: HostCacheConfig) -> HostCachePaths:
        return cls(cfg.resolved_dir(), cfg.name)

    def _file(self, suffix: str) -> str:
        return os.path.join(self.dir, f"{self.name}{suffix}")

    @property
    def socket(self) -> str:
        return self._file(".sock")

    @property
    def lock(self) -> str:
        return self._file(".lock")

    @property
    def log(self) -> str:
        return self._file(".log")

    @property
    def config(self) -> str:
        return self._file(".yaml")

    @property
    def node_id(self) -> str:
        """The service's arena identity (stale arenas of this id are collected at start)."""
        return f"host-cache-{self.name}"

    def ensure_dir(self) -> None:
        """Create the directory (0700) or check that it is ours and private."""
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            st = os.lstat(self.dir)
        except OSError as exc:
            raise ValueError(f"host_cache.dir {self.dir!r}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError(f"host_cache.dir {self.dir!r} is not a directory")
        if st.st_uid != os.geteuid():
            raise ValueError(f"host_cache.dir {self.dir!r} belongs to uid {st.st_uid}, not to us")
        if st.st_mode & 0o022:
            raise ValueError(
                f"host_cache.dir {self.dir!r} is writable by others (mode {st.st_mode & 0o777:o})"
            )
