"""A process with our remote tier over Mooncake that starts BEFORE the master exists (run by
``test_mooncake_provider.py`` inside the test's network namespace; no SGLang needed here).

Prints one JSON line when it has measured the calls without a master, waits for a line on stdin
(the test has started the master), then retries a put until the tier has rejoined and prints the
second JSON line."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT
from hicache_mooncake.tiers.pool_providers.mooncake import MooncakeProvider
from hicache_mooncake.tiers.pool_providers.mooncake_config import MooncakeConfig
from hicache_mooncake.tiers.remote_dram_tier import RemoteDramTier

PAGE = 64 << 10


def main() -> int:
    master = sys.argv[1]
    cfg = MooncakeConfig(master=master, segment_size=32 << 20, retry_interval_s=0.2)
    t0 = time.monotonic()
    tier = RemoteDramTier(MooncakeProvider(cfg, 1.0), timeout_s=1.0)
    built_s = time.monotonic() - t0
    src = np.frombuffer(np.random.default_rng(7).bytes(4 * PAGE), dtype=np.uint8).copy()
    dst = np.zeros_like(src)
    tier.register_memory([src.data, dst.data])

    def items(buf: np.ndarray) -> list:
        v = buf.data
        return [
            (
                f"late-{i}",
                [v[i * PAGE : i * PAGE + PAGE // 2], v[i * PAGE + PAGE // 2 : (i + 1) * PAGE]],
                DEFAULT_CONTEXT,
            )
            for i in range(4)
        ]

    calls = []
    for fn in (
        lambda: tier.contains_batch([k for k, _, _ in items(src)]),
        lambda: tier.put_batch(items(src)),
    ):
        t0 = time.monotonic()
        calls.append({"result": fn(), "elapsed": time.monotonic() - t0})
    print(json.dumps({"built_s": built_s, "calls": calls}), flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30 and not all(tier.put_batch(items(src))):
        time.sleep(0.2)
    rejoin_s = time.monotonic() - t0
    got = tier.get_batch_into(items(dst))
    stats = tier.stats()
    print(
        json.dumps(
            {"rejoin_s": rejoin_s, "got": got, "same": bool(np.array_equal(src, dst)), "stats": stats},
            default=str,
        ),
        flush=True,
    )
    tier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
