"""The ``mooncake`` preset end to end: a real ``mooncake_master`` and a segment holder, and SGLang
launched with ``hicache-mooncake launch mooncake.yaml -- --model-path M ...``. Mooncake binds every
address whatever it is told, so the cluster and the server run in a private network namespace (as in
``tests/mooncake``) and the test's HTTP calls are made from inside it."""

from __future__ import annotations

import sys
from pathlib import Path

import e2e_server
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
    written_bytes,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mooncake"))
from mooncake_procs import MASTER_PORT, Holder, Master, Netns  # noqa: E402

pytestmark = pytest.mark.e2e


def test_mooncake_preset_serves_l3_hits_from_the_mooncake_store(e2e_dir: Path, tiny_llama: Path) -> None:
    root = e2e_dir / "mooncake"
    root.mkdir()
    ns = Netns(root)
    e2e_server.NETNS_FD = ns.fd
    server = None
    try:
        Master(ns).start()
        master = f"127.0.0.1:{MASTER_PORT}"
        Holder(ns, "holder0", 50060, master).start()
        config = preset_yaml(
            "mooncake",
            root,
            {
                "tiers": {
                    "remote": {
                        "timeout_s": 5.0,
                        "mooncake": {"master": master, "local_hostname": "127.0.0.1", "replica_num": 1},
                    }
                }
            },
        )
        loaded = yaml.safe_load(config.read_text())
        ours = OurEndpoints(
            loaded["admin"]["port"], loaded["metrics"]["port"], root / "admin" / "admin.token"
        )
        server = launch_server("mooncake", config, tiny_llama, root)
        reference = Reference(tiny_llama)
        prompts = shared_prefix_prompts(seed=21)
        first = [generate(server, ids) for ids in prompts]
        for ids, reply in zip(prompts, first, strict=True):
            assert reply["output_ids"] == reference.answer(ids)

        page_bytes = 2 * 2 * 2 * 16 * 4 * PAGE  # K and V x layers x kv heads x head_dim x float32, per page

        def remote_entries() -> bool:  # Mooncake's store does not count its entries for us
            return written_bytes(ours, "remote") >= 15 * page_bytes

        wait_for("the pages in the Mooncake store", remote_entries, timeout_s=60)
        flush(server)
        before = ours.tier_hits()
        second = [generate(server, ids) for ids in prompts]
        after = ours.tier_hits()
        hit_tokens = [storage_tokens(r) for r in second]
        print(f"mooncake: storage tokens per request {hit_tokens}, our tier hits {after} (before {before})")
        assert hit_tokens[0] == 15 * PAGE, second[0]["meta_info"]
        assert sum(after.values()) - sum(before.values()) >= 15, (before, after)
        for a, b in zip(first, second, strict=True):
            assert a["output_ids"] == b["output_ids"]
    finally:
        try:
            if server is not None:
                server.stop()
        finally:
            e2e_server.NETNS_FD = None
            ns.close()
