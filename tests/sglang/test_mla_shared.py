"""MLA with TP > 1: only TP rank 0 stores, every rank reads. Ranks are separate processes, so
they share pages through a host-local memory node (``engine: local``: the node's arena in
/dev/shm, read by every rank without a copy through the node)."""

from __future__ import annotations

import pytest
import torch
import yaml
from sglang_helpers import REPO, SMALL, make_backend
from transport_procs import SECRET

from hicache_mooncake.sglang_harness import fill_random_pages, page_snapshot

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size


def shared_extra(port: int) -> dict:
    extra = yaml.safe_load((REPO / "configs" / "mla-shared.yaml").read_text())
    extra.pop("node")
    extra["tiers"]["dram"].update({"capacity": "8MiB", "slab_size": "1MiB"})
    extra["metadata"]["nodes"] = [{"node_id": "local", "host": "127.0.0.1", "port": port}]
    return extra


def test_reader_ranks_find_what_the_writer_rank_stored(node_factory, monkeypatch):
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node = node_factory("local")
    extra = shared_extra(node.port)
    writer, whost = make_backend("page_first", mla=True, extra=extra, tp_rank=0, tp_size=2)
    reader, rhost = make_backend("page_first", mla=True, extra=extra, tp_rank=1, tp_size=2)
    keys = [f"m{i:063x}" for i in range(6)]
    src = whost.alloc(6 * PS)
    fill_random_pages(whost, src, seed=31)
    want = page_snapshot(whost, src)
    assert reader.batch_set_v1(keys, rhost.alloc(6 * PS)) == [True] * 6  # non-writer: acknowledged only
    assert writer.batch_set_v1(keys, src) == [True] * 6
    assert reader.batch_exists(keys) == 6
    dst = rhost.alloc(6 * PS)
    assert reader.batch_get_v1(keys, dst) == [True] * 6
    assert all(torch.equal(a, b) for a, b in zip(want, page_snapshot(rhost, dst), strict=True))
    writer.close()
    reader.close()
