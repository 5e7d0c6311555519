"""The second process of ``bench sglang``'s host-cache row (underscore: a helper, not a target).

``python -m hicache_mooncake.tools.bench._host_cache_reader SPEC_JSON``: builds the same SGLang host pool
and keys as the writer (``page_workload``), attaches a backend to the running host cache, checks
that the writer's pages are there and byte-exact, then times reading all of them through
``batch_get_v1`` and a plain memcpy of the same parts, side by side; prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main() -> None:
    spec: dict[str, Any] = json.loads(sys.argv[1])
    import torch

    from hicache_mooncake.tools.bench._sglang_io import PageStamps, create_backend, page_workload, v1_batches
    from hicache_mooncake.tools.bench.sglang import _memcpy_baseline, memcpy_tag
    from hicache_mooncake.tools.sglang_harness import page_snapshot

    w = page_workload(int(spec["page_bytes"]), int(spec["total"]))
    backend = create_backend("dynamic", spec["extra"], w.host)
    try:
        if not backend.host_cache:
            raise SystemExit("the reader is not attached to the host cache")
        found = backend.batch_exists(w.keys[: w.batch])
        if found != w.batch:
            raise SystemExit(f"the reader found {found} of the writer's {w.batch} pages")
        want = page_snapshot(w.host, w.src)
        get_times, mem_times = [], []
        for _ in range(int(spec["repeats"])):
            start = time.perf_counter()
            v1_batches(backend.batch_get_v1, w.batches, w.dst, 64)
            get_times.append(time.perf_counter() - start)
            stamps = PageStamps(w.host)
            try:
                m = _memcpy_baseline(stamps, w.src, w.dst, w.batches, int(spec["page_bytes"]), memcpy_tag)
            finally:
                stamps.close()
            if m.bad_pages:
                raise SystemExit(f"memcpy baseline: {m.bad_pages} pages differ")
            mem_times.append(m.get_seconds)
        ok = all(backend.batch_get_v1(w.keys[: w.batch], w.dst))
        exact = ok and all(torch.equal(a, b) for a, b in zip(want, page_snapshot(w.host, w.dst), strict=True))
        print(json.dumps({"get_times": get_times, "memcpy_get_times": mem_times, "byte_exact": exact}))
    finally:
        backend.close()


if __name__ == "__main__":
    main()
