"""Client-side options shared by every backend (timeouts, pool size, secret, limits)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .wire import Limits


def default_max_stripes() -> int:
    """Stripes of one tcp batch by default: one per CPU this process may run on, at most 4.

    Each stripe is a thread that spends its time in the kernel copying through a socket; past one
    per core they only contend (on a 2-core host, loopback puts of 1-8 MiB pages moved 5-15 %
    less over 4 stripes than over 2, and the raw-socket baseline peaks at 2 connections too)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


@dataclass(frozen=True)
class ClientOptions:
    timeout_s: float = 2.0  # whole-call deadline of every batched operation
    connect_timeout_s: float = 1.0
    connections_per_peer: int = 4
    # tcp: a batch of at least 2 * stripe_min_bytes is split over up to max_stripes connections
    max_stripes: int = field(default_factory=default_max_stripes)
    stripe_min_bytes: int = 4 << 20
    retry_interval_s: float = 1.0  # a peer that failed is not retried (calls miss at once) for this long
    secret: bytes = b""
    limits: Limits = field(default_factory=Limits)
    # without a secret, a node beyond loopback is refused unless this is set (then warned)
    allow_unauthenticated: bool = False
    # the local engine maps only node arenas in this directory (the nodes' node.shm_dir)
    shm_dir: str = "/dev/shm"
