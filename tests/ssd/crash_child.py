"""Child process for the SIGKILL test: a write storm that acknowledges each committed key.

Usage: python crash_child.py DIR ACKFILE SEED DIRECT_IO MAX_BYTES

Every key whose put returned True is appended to ACKFILE with an unbuffered ``os.write``
before the next put starts, so the parent knows exactly what was acknowledged before the kill.
Imports only the SSD engine (no SGLang, no torch).
"""

from __future__ import annotations

import os
import random
import sys
import threading

import numpy as np
import xxhash

from hicache_mooncake.ssd import SsdEngine, SsdOptions


def value_for(key: str, size: int) -> np.ndarray:
    rng = np.random.default_rng(xxhash.xxh64_intdigest(key.encode()))
    return rng.integers(0, 256, size=size, dtype=np.uint8)


def main() -> None:
    d, ackfile, seed, direct, max_bytes = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    eng = SsdEngine(SsdOptions(dirs=(d,), capacity_bytes=512 << 20, region_size=4 << 20, direct_io=direct))
    ack = os.open(ackfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lock = threading.Lock()
    written = [0]

    def storm(tid: int) -> None:
        rng = random.Random(seed * 10 + tid)
        n = 0
        while written[0] < max_bytes:
            batch = []
            for _ in range(rng.randint(1, 6)):
                key = f"s{seed}-t{tid}-{n}"
                n += 1
                size = rng.randint(1, 300_000)
                batch.append((key, size))
            items = [(k, [memoryview(value_for(k, s))]) for k, s in batch]
            res = eng.put_batch(items)
            lines = "".join(f"{k} {s}\n" for (k, s), ok in zip(batch, res, strict=True) if ok)
            with lock:
                if lines:
                    os.write(ack, lines.encode())
                written[0] += sum(s for _, s in batch)

    os.write(ack, b"#ready\n")
    threads = [threading.Thread(target=storm, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.write(ack, b"#done\n")
    eng.close()


if __name__ == "__main__":
    main()
