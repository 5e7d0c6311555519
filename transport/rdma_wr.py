"""Work-request batching for one-sided RDMA (pure): extents -> scatter/gather work requests.

An extent is ``(remote_offset, local parts)``; each part becomes one SGE (split at
``max_sge_bytes``), SGEs are packed into WRs of at most ``max_sge`` entries covering consecutive
remote bytes, and WRs into post batches of at most ``max_wr`` with only the last WR of a batch
signaled (one completion to poll per batch). Every WR carries the index of its extent so a failed
completion maps back to the item it belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .rdma_mr import RegionTable, RemoteArena


@dataclass(frozen=True, slots=True)
class Sge:
    addr: int
    length: int
    lkey: int


@dataclass(frozen=True, slots=True)
class WorkRequest:
    wr_id: int
    item: int  # index of the extent this WR belongs to
    remote_addr: int
    rkey: int
    sges: tuple[Sge, ...]
    signaled: bool = False

    @property
    def length(self) -> int:
        return sum(s.length for s in self.sges)


class UnregisteredBuffer(ValueError):
    pass


def build_work_requests(
    extents: Sequence[tuple[int, Sequence[tuple[int, int]]]],
    regions: RegionTable,
    arena: RemoteArena,
    max_sge: int = 16,
    max_sge_bytes: int = 1 << 30,
    first_wr_id: int = 1,
) -> tuple[list[WorkRequest], list[int]]:
    """``extents``: (remote_offset, [(local_addr, length)]). Returns the WRs and the indexes of
    extents that could not be mapped (outside the arena or not in a registered region)."""
    wrs: list[WorkRequest] = []
    bad: list[int] = []
    wr_id = first_wr_id
    for item, (offset, parts) in enumerate(extents):
        total = sum(n for _, n in parts)
        try:
            remote = arena.address_of(offset, total)
        except Exception:
            bad.append(item)
            continue
        sges: list[Sge] = []
        mapped = True
        for addr, n in parts:
            region = regions.find(addr, n)
            if region is None:
                mapped = False
                break
            pos = 0
            while pos < n:
                chunk = min(n - pos, max_sge_bytes)
                sges.append(Sge(addr + pos, chunk, region.lkey))
                pos += chunk
        if not mapped:
            bad.append(item)
            continue
        pos_remote = remote
        for i in range(0, len(sges), max_sge):
            group = tuple(sges[i : i + max_sge])
            wrs.append(WorkRequest(wr_id, item, pos_remote, arena.rkey, group))
            wr_id += 1
            pos_remote += sum(s.length for s in group)
    return wrs, bad


def post_batches(wrs: Sequence[WorkRequest], max_wr: int) -> list[list[WorkRequest]]:
    """Split into batches of at most ``max_wr`` (the send queue depth); last WR signaled."""
    out = []
    for i in range(0, len(wrs), max_wr):
        batch = list(wrs[i : i + max_wr])
        last = batch[-1]
        batch[-1] = WorkRequest(last.wr_id, last.item, last.remote_addr, last.rkey, last.sges, True)
        out.append(batch)
    return out
