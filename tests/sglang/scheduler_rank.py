"""One SGLang scheduler rank's storage side, in its own process (run by tests as a script).

``python scheduler_rank.py CONFIG.yaml TP_RANK TP_SIZE READY_FILE``: reads CONFIG with SGLang's own
extra-config parser (``@file``, as ``--hicache-storage-backend-extra-config @CONFIG`` does), builds
the backend through SGLang's ``StorageBackendFactory`` with this rank's ``HiCacheStorageConfig`` and
a real host pool, stores and reads back 16 pages (byte-checked), writes ``READY_FILE`` (JSON: the
metrics port, the read-back result), then serves until stdin closes, and closes the backend.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang_helpers import SMALL  # noqa: E402

from hicache_mooncake.tools.sglang_harness import (  # noqa: E402
    fill_random_pages,
    make_host_pool,
    make_storage_config,
    page_snapshot,
)


def main() -> int:
    config, tp_rank, tp_size, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    extra, *_ = HybridCacheController.parse_storage_backend_extra_config(f"@{config}")
    host = make_host_pool("page_first", False, SMALL)
    storage_config = make_storage_config(extra, tp_rank=tp_rank, tp_size=tp_size)
    backend = StorageBackendFactory.create_backend("dynamic", storage_config, host)
    backend.register_mem_pool_host(host)
    keys = [f"{tp_rank:02d}{i:062x}" for i in range(16)]
    src = host.alloc(16 * SMALL.page_size)
    fill_random_pages(host, src, seed=tp_rank)
    stored = backend.batch_set_v1(keys, src)
    dst = host.alloc(16 * SMALL.page_size)
    loaded = backend.batch_get_v1(keys, dst)
    same = all(
        torch.equal(a, b) for a, b in zip(page_snapshot(host, src), page_snapshot(host, dst), strict=True)
    )
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"port": backend.metrics_port, "stored": all(stored), "loaded": all(loaded), "same": same})
    )
    os.replace(tmp, ready)
    sys.stdin.read()  # until the test closes our stdin
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
