"""Writing region summaries (:class:`Summarizer`): when a region is sealed and its last write is
over (on the I/O pool), and at close for every live region still without one (see
:mod:`.summary` for the format and when a summary is used)."""

from __future__ import annotations

import logging

import numpy as np

from .core import EngineCore
from .region import Region, RegionState
from .summary import write_summary

log = logging.getLogger("hicache_mooncake.ssd")


class Summarizer:
    def __init__(self, core: EngineCore) -> None:
        self.core = core

    def entries(self, r: Region) -> list[tuple[str, int, int, int]]:
        """``(key, offset, length, seq)`` of the entries still indexed in ``r`` (lock held; its
        keys are in memory: a region without a summary keeps them)."""
        names = r.names
        if not names:
            return []
        fps = np.frombuffer(r.fps, np.uint64)
        found, col = self.core.index.columns(fps)
        live = found & (col.region == np.uint64(r.rid)) & (col.gen == np.uint64(r.gen))
        first = np.zeros(len(fps), bool)  # a key indexed twice here (a re-put): listed once
        first[np.unique(fps, return_index=True)[1]] = True
        at = np.flatnonzero(live & first)
        return list(
            zip(
                [names[i] for i in at.tolist()],
                col.offset[at].tolist(),
                col.length[at].tolist(),
                col.seq[at].tolist(),
                strict=True,
            )
        )

    def _write(
        self,
        r: Region,
        path: str,
        rid: int,
        gen: int,
        epoch: int,
        end: int,
        entries: list[tuple[str, int, int, int]],
    ) -> None:
        """Write a summary (lock not held); once it is on disk the region's keys are read from it
        and leave memory (:mod:`.names`)."""
        try:
            write_summary(path, rid, gen, epoch, end, entries)
        except OSError as e:
            log.debug("ssd: no summary for %s: %s", path, e)
            return
        with self.core.lock:
            if r.gen == gen and r.summarized and r.state is RegionState.SEALED and not r.writers:
                r.names = None

    def maybe_summarize(self, r: Region) -> None:
        """Write ``r``'s summary once it is sealed and its last write is over (lock held; the
        write runs on the I/O pool)."""
        c = self.core
        if r.state is not RegionState.SEALED or r.writers or r.summarized or c.pool is None or c.closed:
            return
        r.summarized = True
        entries = self.entries(r)
        rid, gen, epoch, end, path = r.rid, r.gen, r.epoch, r.write_off, r.path
        c.pool.submit([lambda: self._write(r, path, rid, gen, epoch, end, entries)])

    def summarize_all_now(self) -> None:
        """At close (no I/O in flight): write the summaries still missing, the active regions'
        included, so the next open reads summaries only."""
        c = self.core
        todo = []
        with c.lock:
            for r in c.regions:
                live = r.state is RegionState.ACTIVE or (r.state is RegionState.SEALED and r.rid in c.fifo)
                if live and not r.summarized and not r.writers and r.fd is not None:
                    r.summarized = True
                    todo.append((r, r.path, r.rid, r.gen, r.epoch, r.write_off, self.entries(r)))
        for r, path, rid, gen, epoch, end, entries in todo:
            self._write(r, path, rid, gen, epoch, end, entries)
