"""Leader election for the cluster's one coordinator role, over any ``MetadataService``.

``LeaderLease.try_acquire()`` takes the lease (SET NX PX in Redis) and returns the fencing token,
which grows with every new leadership: a coordinator passes it with every action it takes, and
whoever acts on those actions refuses tokens lower than the highest it has seen, so a paused
ex-leader whose lease expired cannot do damage.
"""

from __future__ import annotations

import contextlib
import time

from ..errors import MetadataUnavailable
from .base import MetadataService


class LeaderLease:
    def __init__(self, service: MetadataService, role: str, owner: str, lease_ms: int = 5000) -> None:
        self.service, self.role, self.owner, self.lease_ms = service, role, owner, lease_ms
        self.token: int | None = None
        self._valid_until = 0.0

    @property
    def is_leader(self) -> bool:
        return self.token is not None and time.monotonic() < self._valid_until

    def try_acquire(self) -> int | None:
        """Acquire or renew; returns the fencing token while leader, else ``None``."""
        start = time.monotonic()
        try:
            if self.token is not None and self.service.renew_leadership(self.role, self.owner, self.lease_ms):
                self._valid_until = start + self.lease_ms / 1000
                return self.token
            self.token = self.service.acquire_leadership(self.role, self.owner, self.lease_ms)
        except MetadataUnavailable:
            self.token = None
            return None
        if self.token is not None:
            self._valid_until = start + self.lease_ms / 1000
        return self.token

    def release(self) -> None:
        if self.token is not None:
            with contextlib.suppress(MetadataUnavailable):
                self.service.release_leadership(self.role, self.owner)
        self.token = None


class FencingGuard:
    """The receiving side of fencing: accepts an action only with a token >= the highest seen."""

    def __init__(self) -> None:
        self.highest = 0

    def admit(self, token: int) -> bool:
        if token < self.highest:
            return False
        self.highest = token
        return True
