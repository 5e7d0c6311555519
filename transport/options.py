"""Client-side options shared by every backend (timeouts, pool size, secret, limits)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .wire import Limits


@dataclass(frozen=True)
class ClientOptions:
    timeout_s: float = 2.0  # whole-call deadline of every batched operation
    connect_timeout_s: float = 1.0
    connections_per_peer: int = 4
    # tcp: a batch of at least 2 * stripe_min_bytes is split over up to max_stripes connections
    max_stripes: int = 4
    stripe_min_bytes: int = 4 << 20
    retry_interval_s: float = 1.0  # a peer that failed is not retried (calls miss at once) for this long
    secret: bytes = b""
    limits: Limits = field(default_factory=Limits)
    # without a secret, a node beyond loopback is refused unless this is set (then warned)
    allow_unauthenticated: bool = False
    # the local engine maps only node arenas in this directory (the nodes' node.shm_dir)
    shm_dir: str = "/dev/shm"
