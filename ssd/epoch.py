"""Epoch and ``clear`` (:class:`EpochKeeper`).

The epoch in each directory's superblock says which regions are current: a region whose header
carries another epoch is ignored by recovery. ``clear`` bumps the epoch in every superblock
*first*, then drops the index and frees the regions, so the cleared entries can never come back
after a restart. The boot counter (also in the superblock) makes sequence numbers unique across
restarts (``boot << SEQ_BOOT_SHIFT``).
"""

from __future__ import annotations

import logging
import threading

from .allocator import RegionAllocator
from .core import EngineCore
from .format import Superblock
from .region import RegionState
from .writer import WritePath

log = logging.getLogger("hicache_mooncake.ssd")


class EpochKeeper:
    def __init__(self, core: EngineCore, allocator: RegionAllocator, writer: WritePath) -> None:
        self.core = core
        self.alloc = allocator
        self.writer = writer
        self._mutex = threading.Lock()  # one clear at a time

    def load(self) -> None:
        """At open: take the highest epoch and boot of the directories' superblocks, count this boot."""
        c = self.core
        o = c.options
        sbs = [Superblock.read(d) for d in o.dirs]
        c.epoch = max((sb.epoch for sb in sbs if sb is not None), default=0)
        c.boot = max((sb.boot for sb in sbs if sb is not None), default=0) + 1
        for d in o.dirs:
            try:
                Superblock(c.epoch, c.boot, o.region_size).write(d)
            except OSError as e:
                # Disk full: open anyway (puts will fail until space returns). Sequence numbers
                # stay unique through the recovered maximum (see attach).
                log.warning("ssd: cannot write superblock in %s: %s", d, e)
                c.counts["superblock_write_errors"] += 1

    def clear(self) -> None:
        """Drop everything, durably: the epoch in every superblock is bumped first, so regions
        written before (their headers carry the old epoch) are ignored by any later recovery."""
        c = self.core
        with self._mutex:
            with c.lock:
                if c.closed:
                    return
                new_epoch = c.epoch + 1
            for d in c.options.dirs:
                try:
                    Superblock(new_epoch, c.boot, c.options.region_size).write(d)
                except OSError:
                    log.exception("ssd clear: cannot write superblock in %s", d)
                    with c.lock:
                        c.counts["clear_errors"] += 1
            with c.lock:
                c.epoch = new_epoch
                c.index.clear()
                self.writer.forget_all()
                for r in c.regions:
                    if r.state in (RegionState.ACTIVE, RegionState.SEALED, RegionState.DRAINING):
                        r.keys = []
                        r.live_bytes = 0
                        r.state = RegionState.DRAINING if r.pinned else RegionState.FREE
                self.alloc.forget_all()
                c.counts["clears"] += 1
