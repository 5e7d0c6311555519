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
        """Create the directory (0700) or check that it is ours and private: another user's, or
        one others may write into, is refused (``ValueError`` naming ``host_cache.dir``, the owner,
        the mode and the fix); ours with read or search bits for others (made before this rule)
        is tightened to 0700, so the files in it (log, configuration) are ours alone."""
        from hicache_mooncake.ssd.private_dir import (  # the engine: lazily
            SsdUnsafePathError,
            make_private_dir,
        )

        try:
            make_private_dir(self.dir, "host_cache.dir")
            mode = stat.S_IMODE(os.stat(self.dir).st_mode)
        except SsdUnsafePathError as exc:
            raise ValueError(str(exc)) from None
        except OSError as exc:
            raise ValueError(f"host_cache.dir {self.dir!r}: {exc.strerror or exc}") from None
        if mode & 0o077:
            try:
                os.chmod(self.dir, 0o700)
            except OSError as exc:
                raise ValueError(
                    f"host_cache.dir {self.dir!r}: cannot chmod 700: {exc.strerror or exc}"
                ) from None
