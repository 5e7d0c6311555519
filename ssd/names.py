"""Key strings of a region's entries, read where they are kept rather than held in memory.

The index holds fingerprints only (:mod:`.index`) and a region holds its entries' fingerprints
(``Region.fps``). The keys themselves are in memory only while the region's summary is not on
disk (``Region.names``: the region being written, one per directory, and regions found by a
scan until their summary is written); after that they are read from the summary, or, if it is
gone, from the entry headers (a scan of the region's file). Who needs them: reclaim (``keep`` and
``on_evict``), ``SsdEngine.keys``, and a synchronous eviction under the lock, which cannot read a
file there: it records the fingerprints it dropped (``Region.untold``) and whoever next owns the
region alone (its reopen, or the removal of its file, both off the lock) tells ``on_evict`` their
keys before the region's summary and entries are gone (:func:`tell_untold`).

A key stored again between its eviction and that telling is not told (it is held again).

Failure semantics: a summary or file that cannot be read gives no keys (``None``); the entries
are still dropped from the index (a miss, never wrong bytes), only their ``on_evict`` is lost
(logged).
"""

from __future__ import annotations

import logging

import numpy as np

from hicache_mooncake.native import fingerprints

from .core import EngineCore
from .recover import recover
from .region import Region
from .summary import read_summary

log = logging.getLogger("hicache_mooncake.ssd")


def read_names(core: EngineCore, path: str, rid: int, gen: int, epoch: int) -> list[str] | None:
    """The keys of the entries of region ``rid`` as written in generation ``gen``: from its
    summary, else from its entry headers; None if neither is readable now (lock not held: file
    I/O; the caller owns or pins the region so its file is not reused meanwhile)."""
    o = core.options
    summ = read_summary(path, rid, o.region_size, epoch)
    if summ is not None and summ.header.gen == gen:
        return summ.keys
    try:
        rec = recover([(rid, path)], o.region_size, epoch, False, core.direct, False, o.max_key_bytes)
    except OSError as e:
        log.warning("ssd: keys of region %s unreadable: %s", path, e)
        return None
    scan = rec.scans[0]
    if scan.header is None or scan.header.gen != gen:
        log.warning("ssd: keys of region %s unreadable: %s", path, scan.status)
        return None
    return [e.key for e in scan.entries]


def region_names(core: EngineCore, r: Region) -> tuple[list[str], np.ndarray] | None:
    """``(keys, fingerprints)`` of the entries of ``r``'s current generation, in memory or read
    (lock not held; ``r`` pinned or owned). Entries listed may since have been removed or
    replaced: callers check each against the index."""
    with core.lock:
        if r.names is not None:
            return list(r.names), np.frombuffer(r.fps, np.uint64).copy()
        path, rid, gen, epoch = r.path, r.rid, r.gen, r.epoch
    keys = read_names(core, path, rid, gen, epoch)
    if keys is None:
        return None
    return keys, fingerprints(keys) if keys else np.zeros(0, np.uint64)


def tell_untold(core: EngineCore, r: Region) -> None:
    """Tell ``on_evict`` the keys of the fingerprints a synchronous eviction dropped from ``r``
    (``r.untold``), reading them from its summary or headers; called by the region's sole owner
    before its file or summary is reused (lock not held)."""
    with core.lock:
        record, r.untold = r.untold, None
        path, rid = r.path, r.rid
    if record is None or core.on_evict is None:
        return
    untold, gen, epoch = record
    keys = read_names(core, path, rid, gen, epoch)
    if keys is None:
        log.warning("ssd: %d keys evicted from %s not told (keys unreadable)", len(untold), path)
        return
    dropped = set(untold.tolist())
    fps = fingerprints(keys) if keys else np.zeros(0, np.uint64)
    mine = [i for i, fp in enumerate(fps.tolist()) if fp in dropped]
    with core.lock:  # a key stored again since it was dropped is not told gone
        back = core.index.lookup(fps[mine]) if mine else []
    told = [keys[i] for i, loc in zip(mine, back, strict=True) if loc is None]
    core.notify_evicted(list(dict.fromkeys(told)))
