"""Epoch, boot counter, region map and ``clear`` (:class:`EpochKeeper`).

The epoch says which regions are current: a region whose header carries another epoch is ignored
by recovery. It lives in each directory's reserved state file (:mod:`.state`, overwritten in
place, so writing it never needs free space) and, best effort, in the JSON superblock; the
effective epoch is the highest found. The boot counter makes sequence numbers unique across
restarts (``boot << SEQ_BOOT_SHIFT``). The region map (which region files the engine made and did
not remove) lets recovery and fsck tell a deleted region file from one never made. A change of
the map (a region file made or removed) is written in the background on the I/O pool (coalesced,
state file only), never while a put waits for its region, and without a device flush (a flush
stalls every write in flight; the engine's ``sync`` and close make the map durable). A map update
lost in a crash or a power loss only means that file's loss is not detected (an unmapped file's
entries are still recovered, and it is mapped again when the engine next opens it); epoch and
boot records are always flushed before they count.

``clear`` is fail closed: under the lock it bumps the epoch in memory, drops the index and frees
the regions (nothing written before the clear is served from then on: pages written since go
to regions of the new epoch), then writes the new epoch to every directory. Data calls go on
while that write runs: a crash before it lands means the clear never completed (``clear`` had
not returned). If the write does not finish by the deadline (a stalled disk), ``clear`` returns
False and every data call is refused (``core.refusing``) until it lands in the background. If it
fails, the engine refuses every call for the rest of its life, the old region files are
unlinked where the filesystem still allows it, and the failure is recorded durably
(``clear_record``: in the directory, or outside it when the filesystem went read-only), so a
restart refuses too, until an operator runs the repair the error line names.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from .allocator import RegionAllocator
from .clear_record import (
    REPAIR_COMMAND,
    find_failures,
    operator_action,
    record_failure,
    records_dir,
    refusal_message,
)
from .core import EngineCore
from .format import Superblock, region_files_in
from .io import WRITE, run_with_deadline
from .region import RegionState
from .state import State, StateFile, load_dir
from .writer import WritePath

log = logging.getLogger("hicache_mooncake.ssd")


class EpochKeeper:
    def __init__(self, core: EngineCore, allocator: RegionAllocator, writer: WritePath) -> None:
        self.core = core
        self.alloc = allocator
        self.writer = writer
        self._mutex = threading.Lock()  # one clear at a time
        self._map_lock = threading.Lock()
        self._map_queued: set[int] = set()  # directories whose map write is queued on the pool
        self._map_writer = threading.Lock()  # background map writes, one at a time
        self.files: list[StateFile | None] = []
        self.maps: list[set[int]] = []  # per directory: region ids whose files the engine made
        self.missing: list[tuple[str, int]] = []  # (directory, region id) in the map, file gone
        self._landed = 0  # the highest epoch a clear made durable (under core.lock)

    def load(self) -> None:
        """At open: take the highest epoch and boot found, count this boot, and write them. A
        recorded failed clear (``clear_record``) makes the engine refuse every call."""
        c = self.core
        o = c.options
        n = o.num_regions
        records = find_failures(o.dirs)
        if records:
            msg = refusal_message(o.dirs, records)
            c.refusing = "clear failed before this start: " + msg
            c.counts["clear_failed_at_open"] += 1
            log.error("%s", msg)
        found = [load_dir(d) for d in o.dirs]
        c.epoch = max([f.epoch for f in found] + [0])
        c.boot = max([f.boot for f in found] + [0]) + 1
        nd = len(o.dirs)
        for di, d in enumerate(o.dirs):
            info = found[di]
            on_disk = {r for r in region_files_in(d) if r < n and r % nd == di}
            if info.mapped is not None and info.region_size == o.region_size:
                mapped = {r for r in info.mapped if r < n and r % nd == di}
                self.missing.extend((d, r) for r in sorted(mapped - on_disk))
                self.maps.append(mapped & on_disk)
            else:
                self.maps.append(on_disk)  # a store from before the state file, or a new layout
            try:
                self.files.append(StateFile(d, n, info.state))
            except OSError as e:
                log.warning("ssd: cannot make the state file in %s: %s (clear will need free space)", d, e)
                c.counts["state_file_errors"] += 1
                self.files.append(None)
        for d, r in self.missing:
            log.warning("ssd: region file %s of %s is missing (deleted?): its entries are lost", r, d)
        c.counts["recover_missing_regions"] += len(self.missing)
        for di, d in enumerate(o.dirs):
            try:
                self._persist(di)
            except OSError as e:
                # Disk full or read-only: open anyway (puts fail until space returns). Sequence
                # numbers stay unique through the recovered maximum (see attach).
                log.warning("ssd: cannot write the state of %s: %s", d, e)
                c.counts["superblock_write_errors"] += 1

    def _persist(self, di: int) -> None:
        """Write the current epoch, boot and region map of directory ``di`` (state file, then the
        JSON superblock best effort). Serialised with the map writes (``_map_writer``), and the
        record is taken inside the turn, so a newer epoch is never overwritten by an older one.
        The map lock is held only for the snapshot, never during the write: a put that opens a
        region while a clear writes its epoch does not wait for the disk."""
        c = self.core
        d = c.options.dirs[di]
        f = self.files[di]
        with self._map_writer:
            with self._map_lock:
                self._map_queued.discard(di)
                rec = State(c.epoch, c.boot, c.options.region_size, set(self.maps[di]))
            if f is not None:
                f.write(rec)
            try:
                Superblock(rec.epoch, c.boot, c.options.region_size).write(d)
            except OSError:
                if f is None:
                    raise

    def region_made(self, di: int, rid: int, present: bool) -> None:
        """The engine made or opened (``present``) or removed region file ``rid``: update the map,
        on disk in the background (one queued write per directory covers every change before it
        runs)."""
        with self._map_lock:
            if (rid in self.maps[di]) == present:
                return
            (self.maps[di].add if present else self.maps[di].discard)(rid)
            if di in self._map_queued:
                return
            self._map_queued.add(di)
        pool = self.core.pool
        if pool is None:
            self._persist_map(di)
        else:
            pool.submit([lambda: self._persist_map(di)], priority=WRITE)

    def _persist_map(self, di: int) -> None:
        """Write directory ``di``'s state record (its map as it is now); errors are counted. The
        map lock is not held during the write (a region open must never wait for it); writers
        of one directory take turns and each takes its snapshot in its turn, so a newer map is
        never overwritten by an older one."""
        c = self.core
        f = self.files[di]
        with self._map_writer:
            with self._map_lock:
                self._map_queued.discard(di)
                rec = State(c.epoch, c.boot, c.options.region_size, set(self.maps[di]))
            if f is None:
                return
            try:
                f.write(rec, durable=False)
            except OSError:
                with c.lock:
                    c.counts["state_file_errors"] += 1

    def sync(self) -> None:
        """Make every directory's last map update durable; errors are counted."""
        for f in self.files:
            if f is None:
                continue
            try:
                f.sync()
            except OSError:
                with self.core.lock:
                    self.core.counts["state_file_errors"] += 1

    def clear(self, deadline: float | None = None) -> bool:
        """Drop everything (see the module docstring); True once the new epoch is durable."""
        c = self.core
        with self._mutex:
            with c.lock:
                if c.closed or c.refusing.startswith("clear failed"):
                    return False
                c.epoch += 1
                new_epoch = c.epoch
                c.index.clear()
                self.writer.forget_all()
                for r in c.regions:
                    r.untold = None  # nothing is told on a clear
                    if r.state in (RegionState.ACTIVE, RegionState.SEALED, RegionState.DRAINING):
                        r.reset_entries()
                        r.state = RegionState.DRAINING if r.pinned else RegionState.FREE
                self.alloc.forget_all()
                c.counts["clears"] += 1
            done, ok = run_with_deadline(
                lambda: self._persist_epoch(new_epoch), deadline, "hicache-ssd-clear"
            )
            if not done:
                with c.lock:  # refused until the write lands (unless it landed just now)
                    if self._landed < new_epoch and not c.refusing:
                        c.refusing = "clear: new epoch not on disk yet"
        if not done:
            c.timed_out("clear", deadline or 0.0)
            return False
        return bool(ok)

    def _persist_epoch(self, epoch: int) -> bool:
        c = self.core
        try:
            for di in range(len(c.options.dirs)):
                self._persist(di)
        except OSError as e:
            self._fail_closed(e, epoch)
            return False
        with c.lock:
            self._landed = max(self._landed, epoch)
            if c.epoch == epoch and c.refusing.startswith("clear:"):
                c.refusing = ""
        return True

    def _fail_closed(self, err: OSError, epoch: int) -> None:
        c = self.core
        with c.lock:
            c.refusing = f"clear failed: {err}"
            c.counts["clear_errors"] += 1
            paths = [r.path for r in c.regions]
        removed = 0
        for p in paths:
            with contextlib.suppress(OSError):
                os.unlink(p)
                removed += 1
        for d in c.options.dirs:
            with contextlib.suppress(OSError):
                dfd = os.open(d, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        dirs = c.options.dirs
        records = record_failure(dirs, epoch, str(err))
        if records:  # one record refuses the whole engine at the next open
            log.error(
                "ssd %s: clear could not write the new epoch (%s): the SSD tier refuses every call "
                "from now on and after every restart (recorded in %s), %s; %d of %d old region "
                "files deleted",
                ",".join(dirs), err, ", ".join(records), operator_action(dirs, records), removed, len(paths),
            )  # fmt: skip
        else:
            log.error(
                "ssd %s: clear could not write the new epoch (%s): the SSD tier refuses every call "
                "from now on (%d of %d old region files deleted), and the failure could be recorded "
                "in no place a restart reads (directory and %s not writable): do not restart before "
                "the filesystem is writable, then run `%s %s`",
                ",".join(dirs), err, removed, len(paths), records_dir(), REPAIR_COMMAND, " ".join(dirs),
            )  # fmt: skip

    def close(self) -> None:
        for f in self.files:
            if f is not None:
                f.close()
