"""Recovery of regions without a usable summary, in the background (:class:`BackgroundScan`).

At open, regions whose summary is valid are indexed from it at once; the others (open at a
crash, written by an older engine, summary lost) are scanned here, on a daemon thread, while the
engine already serves. Until its scan is done such a region is pinned (``readers``) and outside
the FIFO, so it is never reclaimed, resized away or reopened. When a region's file is read, its
entries join the index :data:`INDEX_SLICE` at a time, the engine lock released between slices so
serving calls never wait for a whole region (thousands of entries at small pages); each joins only
if no newer entry of its key (higher sequence number) is indexed by then. A ``clear`` or ``close``
between slices ends the region's indexing (``clear`` has emptied its bookkeeping; the region is
freed once unpinned). When every slice is in, the region is sealed into the FIFO (by generation)
and its summary is written, so the next open reads the summary. An entry indexed before its
region is sealed is served like any other: its region is pinned and its bytes are checked on read.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from .core import EngineCore
from .index import Location
from .recover import EntryRecord, recover, region_loss
from .region import Region, RegionState

log = logging.getLogger("hicache_mooncake.ssd")

INDEX_SLICE = 512
"""Entries a background scan indexes per hold of the engine lock (a fraction of a millisecond)."""


def index_entries(
    core: EngineCore, r: Region, keys: list[str], offsets: list[int], lengths: list[int], seqs: list[int]
) -> int:
    """Index ``r``'s entries where they are the newest of their key (lock held; native calls:
    one to fingerprint them, one to look them up, two to index them); returns how many."""
    if not keys:
        return 0
    index = core.index
    rid, gen = r.rid, r.gen
    fps = index.fps(keys).tolist()
    newest: dict[int, int] = {}  # fingerprint -> seq indexed (the table's, then this slice's)
    for fp, cur in zip(fps, index.lookup(np.array(fps, np.uint64)), strict=True):
        if cur is not None:
            newest[fp] = cur.seq
    new_fps: list[int] = []
    new_locs: list[Location] = []
    for fp, key, off, length, seq in zip(fps, keys, offsets, lengths, seqs, strict=True):
        if newest.get(fp, -1) >= seq:
            continue
        newest[fp] = seq
        new_fps.append(fp)
        new_locs.append(Location(rid, gen, off, length, seq))
        r.add(fp, key, length)
    index.set_many(np.array(new_fps, np.uint64), new_locs)  # one lookup and one insert per slice
    return len(new_fps)


def seal_into_fifo(core: EngineCore, r: Region) -> None:
    """Insert a recovered region into the FIFO at its generation's place (lock held)."""
    gens = [core.regions[x].gen for x in core.fifo]
    core.fifo.insert(bisect.bisect_left(gens, r.gen), r.rid)


class BackgroundScan:
    def __init__(
        self,
        core: EngineCore,
        todo: list[tuple[int, str]],
        mapped: Callable[[int], bool],
        on_sealed: Callable[[Region], None],
    ) -> None:
        self.core = core
        self.todo = todo
        self._mapped = mapped
        self._on_sealed = on_sealed
        self.left = len(todo)
        self.seconds = 0.0
        self._epoch = core.epoch
        for rid, _path in todo:
            r = core.regions[rid]
            r.state = RegionState.SEALED
            r.readers += 1  # pinned until scanned
        self.thread = threading.Thread(target=self._run, name="hicache-ssd-rescan", daemon=True)

    def start(self) -> None:
        if self.todo:
            self.thread.start()

    def _run(self) -> None:
        c = self.core
        o = c.options
        t0 = time.monotonic()
        for rid, path in self.todo:
            r = c.regions[rid]
            try:
                if c.closed:
                    with c.lock:
                        r.state = RegionState.DRAINING  # not scanned: freed, never summarized
                    continue
                rec = recover([(rid, path)], o.region_size, self._epoch, o.verify_on_recover, c.direct, False,
                              o.max_key_bytes)  # fmt: skip
                scan = rec.scans[0]
                why = region_loss(scan, o.region_size, self._mapped(rid))
                if why:
                    log.warning("ssd: region file %s: %s; its entries are lost", path, why)
                with c.lock:
                    c.counts.update({k: v for k, v in rec.counts().items() if k != "recovered_entries"})
                    c.counts["recover_lost_regions"] += 1 if why else 0
                    r.allocated = scan.file_size >= o.region_size
                    live = self._scanning(r) and scan.status == "live"
                    if live:
                        assert scan.header is not None
                        r.gen = scan.header.gen
                        r.epoch = c.epoch
                        r.write_off = scan.end_offset
                    elif r.state is RegionState.SEALED:
                        r.state = RegionState.DRAINING  # nothing live: free once unpinned
                if live:
                    self._index_and_seal(r, scan.entries)
            except Exception:  # noqa: BLE001 - a scan failure only loses that region's entries
                log.exception("ssd background scan of %s failed", path)
                with c.lock:
                    if r.state is RegionState.SEALED and r.rid not in c.fifo:
                        # the slices indexed so far: they point into a region to be freed
                        c.index.pop_if_many(np.frombuffer(r.fps, np.uint64).copy(), r.rid, r.gen)
                        r.state = RegionState.DRAINING
            finally:
                with c.lock:
                    r.readers -= 1
                    if r.state is RegionState.DRAINING and not r.pinned:
                        r.state = RegionState.FREE
                        r.reset_entries()
                    self.left -= 1
        self.seconds = time.monotonic() - t0
        log.info("ssd engine: background scan of %d regions done in %.2fs", len(self.todo), self.seconds)

    def _index_slice(
        self, r: Region, keys: list[str], offsets: list[int], lengths: list[int], seqs: list[int]
    ) -> bool:
        """Index one slice of ``r``'s entries under one hold of the lock; False (nothing indexed)
        when the scan no longer counts."""
        c = self.core
        with c.lock:
            if not self._scanning(r):
                return False
            c.counts["recovered_entries"] += index_entries(c, r, keys, offsets, lengths, seqs)
            return True

    def _scanning(self, r: Region) -> bool:
        """Whether ``r``'s scan still counts: no ``clear`` or ``close`` since it began (lock held)."""
        c = self.core
        return not c.closed and c.epoch == self._epoch and r.state is RegionState.SEALED

    def _index_and_seal(self, r: Region, entries: list[EntryRecord]) -> None:
        """Index ``entries`` of ``r`` in slices (lock held per slice only), then seal ``r`` into
        the FIFO; a ``clear`` or ``close`` meanwhile stops it, and ``r`` is freed once unpinned."""
        c = self.core
        keys = [x.key for x in entries]
        offsets = [x.offset for x in entries]
        lengths = [x.payload_len for x in entries]
        seqs = [x.seq for x in entries]
        for i in range(0, len(entries), INDEX_SLICE):
            j = i + INDEX_SLICE
            if not self._index_slice(r, keys[i:j], offsets[i:j], lengths[i:j], seqs[i:j]):
                break
        with c.lock:
            if self._scanning(r):
                seal_into_fifo(c, r)
                self._on_sealed(r)
            elif r.state is RegionState.SEALED:
                r.state = RegionState.DRAINING  # closed meanwhile: scanned again at the next open
