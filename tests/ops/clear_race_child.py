"""Child process of ``test_clear_race.py``: a real store (DRAM + SSD with region reclaim) that three
threads set and get while a fourth clears it every 0.2-1.5 s, until the parent kills it (-9).

Every set writes a page that names its key and a unique write id ``w``. A sidecar log (O_APPEND,
one line per event; clears fsynced) says what happened, and survives the kill:

- ``S k``: clear number ``k`` starts; ``C k``: it returned (completed);
- ``W w s``: the set of write ``w`` returned True when ``s`` clears had started (so it completed
  before clear ``s + 1`` started: once clear ``s + 1`` has completed, ``w`` must never be served);
- ``V ...``: a violation (a page served after a clear that completed after its write);
- ``G n``: pages served and checked; ``R n``: SSD regions reclaimed so far in this life;
- ``O pid``: this life opened the store and read every key back.

A get reads the number of completed clears ``d`` before it starts; a page ``w`` it serves is a
violation when ``s(w) + 1 <= d``. Writes whose ``W`` line is missing (not yet returned) are not
judged, so the check has no false positives. At start the child reads the log (the numbering
of clears and writes goes on across lives) and first reads every key back (what a restart
serves). ``verify`` mode does only that and exits.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import numpy as np

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAGE = 16 << 10
KEYS = [f"k{i:04d}" for i in range(600)]


class Log:
    def __init__(self, path: str) -> None:
        self.started = self.done = self.next_w = 0
        self.written: dict[int, int] = {}  # write id -> clears started when its set returned
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) < 2 or not parts[1].isdigit():
                        continue  # a line cut by the kill
                    n = int(parts[1])
                    if parts[0] == "S":
                        self.started = max(self.started, n)
                    elif parts[0] == "C":
                        self.done = max(self.done, n)
                    elif parts[0] == "W" and len(parts) == 3 and parts[2].isdigit():
                        self.written[n] = int(parts[2])
                        self.next_w = max(self.next_w, n + 1)
        self.started = max(self.started, self.done)
        # writes cut by the kill have no W line: a new life numbers its writes apart from them
        self.next_w = (self.next_w // 1_000_000 + 1) * 1_000_000
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.lock = threading.Lock()

    def line(self, text: str, sync: bool = False) -> None:
        os.write(self.fd, (text + "\n").encode())
        if sync:
            os.fsync(self.fd)


def page(key: str, w: int) -> np.ndarray:
    return np.frombuffer(f"{key}|w{w}|".encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def open_store(d: str) -> TieredStore:
    engine = SsdEngine(SsdOptions(dirs=(d,), capacity_bytes=6 << 20, region_size=1 << 20, direct_io="off"))
    assert engine.wait_recovered(60)
    tiers = [DramTier(1 << 20, 1 << 20, prefault=False), SsdTier(engine)]
    return TieredStore(tiers, lambda: make_policy("lru"), StoreOptions(timeout_s=10.0))


def check(log: Log, store: TieredStore, keys: list[str], served_from: int) -> int:
    """Get ``keys`` and judge every page served; ``served_from``: completed clears when the get
    started. Returns the pages served."""
    bufs = [np.zeros(PAGE, np.uint8) for _ in keys]
    ok = store.get_batch_into(keys, [[memoryview(b)] for b in bufs])
    served = 0
    for key, buf, hit in zip(keys, bufs, ok, strict=True):
        if not hit:
            continue
        served += 1
        head = bytes(buf[:32]).split(b"|")
        if head[0].decode(errors="replace") != key or not head[1].startswith(b"w"):
            log.line(f"V wrong-bytes key={key} head={bytes(buf[:24])!r}", sync=True)
            continue
        w = int(head[1][1:])
        s = log.written.get(w)
        if s is not None and s + 1 <= served_from:
            log.line(
                f"V stale key={key} w={w} written-before-clear={s + 1} completed={served_from}", sync=True
            )
    return served


def read_all(log: Log, store: TieredStore) -> int:
    d = log.done
    return sum(check(log, store, [k], d) for k in KEYS)


def main() -> int:
    mode, d, path, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    log = Log(path)
    store = open_store(d)
    log.line(f"G {read_all(log, store)}")
    log.line(f"O {os.getpid()}")  # open and read back: the parent's clock for this life starts
    if mode == "verify":
        store.close()
        return 0
    stop = threading.Event()

    def worker(tid: int) -> None:
        rng = random.Random(seed * 10 + tid)
        while not stop.is_set():
            keys = rng.sample(KEYS, rng.randint(1, 4))
            if rng.random() < 0.5:
                with log.lock:
                    ws = list(range(log.next_w, log.next_w + len(keys)))
                    log.next_w += len(keys)
                ok = store.put_batch(keys, [[memoryview(page(k, w))] for k, w in zip(keys, ws, strict=True)])
                s = log.started  # read after the set returned
                for w, good in zip(ws, ok, strict=True):
                    if good:
                        log.written[w] = s
                        log.line(f"W {w} {s}")
            else:
                served = check(log, store, keys, log.done)
                if served:
                    log.line(f"G {served}")

    def clearer() -> None:
        rng = random.Random(seed)
        while not stop.wait(rng.uniform(0.2, 1.5)):
            k = log.started + 1
            log.started = k
            log.line(f"S {k}", sync=True)
            store.clear()
            log.done = k
            log.line(f"C {k}", sync=True)
            ssd = store.ssd
            if ssd is not None:
                log.line(f"R {ssd.engine.stats().get('reclaimed_regions', 0)}")

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(3)]
    threads.append(threading.Thread(target=clearer, daemon=True))
    for t in threads:
        t.start()
    time.sleep(float(os.environ.get("CLEAR_RACE_LIFE_S", "600")))
    stop.set()
    for t in threads:
        t.join(30)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
