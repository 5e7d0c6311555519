"""SGLang fixtures: (once per session) the runtime context + 1-rank gloo group that SGLang's
cache controller needs."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from sglang_helpers import SMALL


@pytest.fixture(scope="session")
def sglang_runtime() -> Any:
    """SGLang's published runtime context and a 1-rank gloo world (what the scheduler sets up)."""
    import torch.distributed as dist
    from sglang.srt.server_args import ServerArgs
    from sglang.test.parallel_groups import publish

    args = ServerArgs(
        model_path="dummy",
        device="cpu",
        page_size=SMALL.page_size,
        enable_hierarchical_cache=True,
        hicache_io_backend="direct",
        hicache_mem_layout="page_first_direct",
        hicache_ratio=2.0,
        hicache_write_policy="write_through",
        hicache_storage_prefetch_policy="wait_complete",
    )
    publish(args, role="test")
    store_file = tempfile.mktemp(prefix="hicache-test-gloo-")
    dist.init_process_group("gloo", store=dist.FileStore(store_file, 1), rank=0, world_size=1)
    yield args
    dist.destroy_process_group()
    Path(store_file).unlink(missing_ok=True)
