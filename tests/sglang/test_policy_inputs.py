"""What the policy sees under SGLang: the presets make SGLang pass each call's prefix keys, and
through SGLang's own HybridCacheController (real backup thread) the policy receives the chain
parent of a call's first page (issue 14 item 3); a session id SGLang passes in ``extra_info``
reaches the store's hint channel (item 4)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from sglang_helpers import REPO, SMALL, make_backend, small_extra
from test_controller_attach import attach, controller  # noqa: F401  (the fixture)

from hicache_mooncake.tiers.policy import AccessContext, register_policy
from hicache_mooncake.tiers.policy.hints import HintState
from hicache_mooncake.tiers.policy.lru import LruPolicy
from hicache_mooncake.tools.sglang_harness import fill_random_pages

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size


@register_policy
class _RecordingPolicy(LruPolicy):
    """LRU that records what each set told it (a real policy run by the real store)."""

    name = "test-recording-prefix"
    seen: ClassVar[list[tuple[str, str | None, int]]] = []

    def on_set(self, key: str, ctx: AccessContext = AccessContext()) -> bool:  # noqa: B008
        self.seen.append((key, ctx.prev_key, ctx.prefix_hits))
        return super().on_set(key, ctx)


@pytest.mark.parametrize("preset", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_presets_make_sglang_pass_prefix_keys(preset: str) -> None:
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    parsed = HybridCacheController.parse_storage_backend_extra_config(f"@{REPO / 'configs' / preset}")
    extra, pass_prefix_keys = parsed[0], parsed[-1]
    assert pass_prefix_keys is True
    assert "hicache_storage_pass_prefix_keys" not in extra  # SGLang consumed it


def test_the_policy_receives_chain_parents_through_the_controller(controller: Any) -> None:  # noqa: F811
    from sglang.srt.mem_cache.utils import get_hash_str

    ctl, host, group = controller
    extra = small_extra(policy=_RecordingPolicy.name)
    assert extra["hicache_storage_pass_prefix_keys"] is True  # from configs/default.yaml
    attach(ctl, group, extra)
    _RecordingPolicy.seen.clear()
    n_pages = 6
    tokens = list(range(5000, 5000 + n_pages * PS))
    hashes, prior = [], None
    for i in range(n_pages):  # SGLang's own page hash chain
        prior = get_hash_str(tokens[i * PS : (i + 1) * PS], prior)
        hashes.append(prior)
    src = host.alloc(n_pages * PS)
    fill_random_pages(host, src, seed=3)
    # What SGLang's radix tree does for a node whose parent is stored: back up the node's pages
    # with the parent's page hashes as prefix keys (hicache_storage_pass_prefix_keys: true).
    head, tail = 2, n_pages - 2
    ctl.write_storage(src[: head * PS], tokens[: head * PS], hash_value=hashes[:head])
    assert ctl.ack_backup_queue.get(timeout=30).completed_tokens == head * PS
    ctl.write_storage(
        src[head * PS :], tokens[head * PS :], hash_value=hashes[head:], prefix_keys=hashes[:head]
    )
    assert ctl.ack_backup_queue.get(timeout=30).completed_tokens == tail * PS
    host.free(src)
    seen = _RecordingPolicy.seen
    assert len(seen) == n_pages
    keys = [k for k, _prev, _ph in seen]
    assert all(h in k for h, k in zip(hashes, keys, strict=True))  # namespaced page keys, in order
    # first call: a chain head, then each page's parent within the call
    assert seen[0][1:] == (None, 0) and seen[1][1:] == (keys[0], 0)
    # second call: its first page's parent is the last prefix key, and it sits at depth 2
    assert seen[head][1:] == (keys[head - 1], head)
    assert [s[1] for s in seen[head + 1 :]] == keys[head:-1]


def test_a_session_id_sglang_passes_reaches_the_hint_channel() -> None:
    # SGLang 0.5.23 sets extra_info={"session_id": req.session_id} on the external-linker
    # offload path of its unified radix cache; the backend attaches the pages to that session.
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

    backend, host = make_backend()
    try:
        idx = host.alloc(2 * PS)
        page_keys = [f"{i:064x}" for i in range(2)]
        info = HiCacheStorageExtraInfo(prefix_keys=None, extra_info={"session_id": "conv-1"})
        assert all(backend.batch_set_v1(page_keys, idx, info))
        store_keys = [k for k in backend.store.tier("dram").keys() if any(p in k for p in page_keys)]
        assert len(store_keys) == 2
        hints = backend.store.hints
        assert all(hints.state(k) == HintState.LIKELY for k in store_keys)
        hints.close_session("conv-1")
        assert all(hints.state(k) == HintState.UNLIKELY for k in store_keys)
        host.free(idx)
    finally:
        backend.close()
