"""Work-request building for one-sided RDMA (pure): mapped extents -> scatter/gather work requests.

An extent is ``(item, remote_offset, sges)``: its local scatter/gather list (already resolved to
registered memory, see ``engine``) covering consecutive remote bytes. SGEs are split at
``max_msg`` bytes and packed into WRs of at most ``max_sge`` entries and ``max_msg`` bytes; WRs
are cut into posting windows of at most ``window`` with only the last WR of a window signaled
(selective signaling: an RC send queue completes in order, so that one completion vouches for the
whole window, and an error completes with an error status whether signaled or not). Every WR
carries a unique ``wr_id`` and the index of its item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..errors import TransportError
from .mr import RemoteArena


@dataclass(frozen=True, slots=True)
class Sge:
    addr: int
    length: int
    lkey: int


@dataclass(frozen=True, slots=True)
class WorkRequest:
    wr_id: int
    item: int  # index of the item this WR belongs to
    remote_addr: int
    rkey: int
    sges: tuple[Sge, ...]
    signaled: bool = False

    @property
    def length(self) -> int:
        return sum(s.length for s in self.sges)


def split_sge(sge: Sge, max_bytes: int) -> list[Sge]:
    if sge.length <= max_bytes:
        return [sge]
    return [
        Sge(sge.addr + pos, min(max_bytes, sge.length - pos), sge.lkey)
        for pos in range(0, sge.length, max_bytes)
    ]


def build_work_requests(
    extents: Sequence[tuple[int, int, Sequence[Sge]]],
    arena: RemoteArena,
    max_sge: int,
    max_msg: int,
    next_id: Callable[[], int],
) -> tuple[list[WorkRequest], list[int]]:
    """Returns the WRs and the items whose extent lies outside the remote arena."""
    wrs: list[WorkRequest] = []
    bad: list[int] = []
    for item, offset, sges in extents:
        total = sum(s.length for s in sges)
        try:
            remote = arena.address_of(offset, total)
        except TransportError:
            bad.append(item)
            continue
        group: list[Sge] = []
        nbytes = 0
        for piece in (p for s in sges for p in split_sge(s, max_msg)):
            if group and (len(group) >= max_sge or nbytes + piece.length > max_msg):
                wrs.append(WorkRequest(next_id(), item, remote, arena.rkey, tuple(group)))
                remote += nbytes
                group, nbytes = [], 0
            group.append(piece)
            nbytes += piece.length
        if group:
            wrs.append(WorkRequest(next_id(), item, remote, arena.rkey, tuple(group)))
    return wrs, bad


def windows(wrs: Sequence[WorkRequest], size: int) -> list[list[WorkRequest]]:
    """Posting windows of at most ``size`` WRs; the last WR of each is signaled."""
    out = []
    for i in range(0, len(wrs), size):
        window = list(wrs[i : i + size])
        window[-1] = replace(window[-1], signaled=True)
        out.append(window)
    return out
