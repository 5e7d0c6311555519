"""The ``cluster`` preset end to end: a real redis-server and memory node (``hicache-mooncake node``),
and SGLang launched with ``hicache-mooncake launch cluster.yaml -- --model-path M ...``. After
``/flush_cache`` the pages come back through the memory pool with the same greedy answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from e2e_launch import launch_server, preset_yaml
from e2e_requests import (
    PAGE,
    OurEndpoints,
    Reference,
    flush,
    generate,
    shared_prefix_prompts,
    storage_tokens,
    wait_for,
)
from transport_procs import SECRET, NodeProc, RedisProc

pytestmark = pytest.mark.e2e


def test_cluster_preset_serves_l3_hits_through_the_memory_pool(
    e2e_dir: Path, tiny_llama: Path, redis_server: RedisProc, node_factory: Callable[..., NodeProc]
) -> None:
    node_factory("node-e2e", redis_url=redis_server.url, namespace="e2e", capacity="64MiB")
    root = e2e_dir / "cluster"
    root.mkdir()
    config = preset_yaml(
        "cluster",
        root,
        {
            "tiers": {"remote": {"timeout_s": 5.0}},
            "metadata": {"url": redis_server.url, "namespace": "e2e"},
        },
    )
    loaded = yaml.safe_load(config.read_text())
    ours = OurEndpoints(loaded["admin"]["port"], loaded["metrics"]["port"], root / "admin" / "admin.token")
    server = launch_server("cluster", config, tiny_llama, root, env={"HICACHE_NODE_SECRET": SECRET})
    try:
        reference = Reference(tiny_llama)
        prompts = shared_prefix_prompts(seed=11)
        first = [generate(server, ids) for ids in prompts]
        for ids, reply in zip(prompts, first, strict=True):
            assert reply["output_ids"] == reference.answer(ids)

        def remote_entries() -> bool:
            return int(ours.tiers().get("remote", {}).get("entries", 0)) >= 15

        wait_for("the pages in the memory pool", remote_entries, timeout_s=60)
        flush(server)
        before = ours.tier_hits()
        second = [generate(server, ids) for ids in prompts]
        after = ours.tier_hits()
        hit_tokens = [storage_tokens(r) for r in second]
        print(f"cluster: storage tokens per request {hit_tokens}, our tier hits {after} (before {before})")
        assert hit_tokens[0] == 15 * PAGE, second[0]["meta_info"]
        assert sum(after.values()) - sum(before.values()) >= 15, (before, after)
        for a, b in zip(first, second, strict=True):
            assert a["output_ids"] == b["output_ids"]
    finally:
        server.stop()
