"""The reserved state file (``hicache-ssd.state``): epoch, boot counter and region map, written
in place so that ``clear`` never needs free space.

Layout: two slots of ``slot_size`` bytes (``slot_size = file size / 2``, a multiple of 4096),
preallocated and zero-filled when the file is made, then only ever overwritten in place (no new
blocks, so a full filesystem cannot refuse the write). Each slot::

    magic "HCMSTAT1" | version u16 | pad u16 | nregions u32 | counter u64 | epoch u64 | boot u64
    | region_size u64 | region map (nregions bits, bit r = region file r was made by the engine
    and not removed by it) | xxh3_64 of everything before it

A write goes to the slot *not* holding the newest record: a torn write leaves the other slot
intact. A reader takes the valid slot with the highest counter. An epoch or boot record is
flushed (``fdatasync``) before it counts (:meth:`StateFile.write`, ``durable``); a region-map update is
not (``durable=False``): on a virtual disk each flush stalled every write in flight for 0.1-0.2 s,
once per new region file. The kernel holds such a record (a killed process loses nothing);
:meth:`StateFile.sync` (the engine's ``sync`` and close) makes it durable, and a power loss before
then loses only the map's latest changes. The JSON
superblock (:class:`~.format.Superblock`) is still written, best effort, for older readers; the
effective epoch is the highest of both.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from dataclasses import dataclass, field

import xxhash

from .format import BLOCK, align_up
from .private_dir import FILE_MODE, O_NOFOLLOW

STATE_NAME = "hicache-ssd.state"
MAGIC = b"HCMSTAT1"
VERSION = 1
_HDR = struct.Struct("<8sHHIQQQQ")  # magic ver pad nregions counter epoch boot region_size


def slot_size_for(nregions: int) -> int:
    return max(BLOCK, align_up(_HDR.size + (nregions + 7) // 8 + 8))


@dataclass
class State:
    epoch: int = 0
    boot: int = 0
    region_size: int = 0
    regions: set[int] = field(default_factory=set)  # region files made and not removed by the engine
    counter: int = 0

    def pack(self, nregions: int, slot: int) -> bytes:
        bitmap = bytearray((nregions + 7) // 8)
        for r in self.regions:
            if r < nregions:
                bitmap[r >> 3] |= 1 << (r & 7)
        body = _HDR.pack(
            MAGIC, VERSION, 0, nregions, self.counter, self.epoch, self.boot, self.region_size
        ) + bytes(bitmap)
        body += struct.pack("<Q", xxhash.xxh3_64_intdigest(body))
        return body + bytes(slot - len(body))


def _parse(buf: bytes) -> State | None:
    if len(buf) < _HDR.size + 8 or buf[:8] != MAGIC:
        return None
    magic, ver, _pad, nregions, counter, epoch, boot, rsize = _HDR.unpack_from(buf, 0)
    end = _HDR.size + (nregions + 7) // 8
    if ver != VERSION or end + 8 > len(buf):
        return None
    (h,) = struct.unpack_from("<Q", buf, end)
    if h != xxhash.xxh3_64_intdigest(buf[:end]):
        return None
    bitmap = buf[_HDR.size : end]
    regions = {i for i in range(nregions) if bitmap[i >> 3] >> (i & 7) & 1}
    return State(epoch, boot, rsize, regions, counter)


def read_state(directory: str) -> State | None:
    """The newest valid record of ``directory``'s state file; None if absent or both slots bad."""
    try:
        with open(os.path.join(directory, STATE_NAME), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 2 * BLOCK or len(data) % (2 * BLOCK):
        return None
    half = len(data) // 2
    recs = [s for s in (_parse(data[:half]), _parse(data[half:])) if s is not None]
    return max(recs, key=lambda s: s.counter) if recs else None


class StateFile:
    """The open state file of one directory; :meth:`write` overwrites the older slot in place."""

    def __init__(self, directory: str, nregions: int, current: State | None) -> None:
        self.path = os.path.join(directory, STATE_NAME)
        self.nregions = nregions
        self._lock = threading.Lock()
        self._counter = current.counter if current is not None else 0
        self._unsynced = False
        need = slot_size_for(nregions)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW, FILE_MODE)
        try:
            size = os.fstat(self.fd).st_size
            if size < 2 * need or size % (2 * BLOCK):
                self._make(need, current)
            self.slot = os.fstat(self.fd).st_size // 2
        except BaseException:
            os.close(self.fd)
            raise

    def _make(self, slot: int, current: State | None) -> None:
        """(Re)build the file at ``2 * slot`` bytes, written out in full (no holes, no unwritten
        extents: later overwrites need no allocation)."""
        tmp = f"{self.path}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | O_NOFOLLOW, FILE_MODE)
        try:
            rec = current or State()
            slots = [bytes(slot), bytes(slot)]
            slots[rec.counter % 2] = rec.pack(self.nregions, slot)
            os.pwrite(fd, b"".join(slots), 0)
            os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            os.close(fd)
            raise
        os.close(self.fd)
        self.fd = fd
        dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def write(self, state: State, durable: bool = True) -> None:
        """Write ``state`` (raises OSError); never allocates. ``durable``: on the device when this
        returns (``fdatasync``); else in the kernel's page cache until :meth:`sync`."""
        with self._lock:
            self._counter += 1
            state.counter = self._counter
            which = self._counter % 2
            n = os.pwrite(self.fd, state.pack(self.nregions, self.slot), which * self.slot)
            if n != self.slot:
                raise OSError(28, "short state write")
            if durable:
                os.fdatasync(self.fd)
            self._unsynced = not durable

    def sync(self) -> None:
        """Make the last record durable if :meth:`write` left it in the page cache (raises
        OSError)."""
        with self._lock:
            if self._unsynced:
                os.fdatasync(self.fd)
                self._unsynced = False

    def close(self) -> None:
        """Sync the last record (best effort) and close the file."""
        with contextlib.suppress(OSError):
            self.sync()
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass
class DirState:
    """What a directory's metadata says, as recovery and fsck both read it (:func:`load_dir`)."""

    epoch: int
    boot: int
    region_size: int  # 0: unknown (no readable state file nor superblock)
    mapped: set[int] | None  # region files the engine made; None: no state file (older store)
    state: State | None
    source: str  # "state file", "superblock" or "none"


def load_dir(directory: str) -> DirState:
    """Read ``directory``'s state file and JSON superblock; the epoch and boot are the highest
    of the two (each only grows). Never raises; a directory with neither is a new store."""
    from .format import Superblock

    st = read_state(directory)
    sb = Superblock.read(directory)
    epoch = max(st.epoch if st else 0, sb.epoch if sb else 0)
    boot = max(st.boot if st else 0, sb.boot if sb else 0)
    rsize = st.region_size if st else (sb.region_size if sb else 0)
    source = "state file" if st else ("superblock" if sb else "none")
    return DirState(epoch, boot, rsize, set(st.regions) if st else None, st, source)
