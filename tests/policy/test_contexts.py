"""The per-key contexts of a call: built positionally for speed, they must equal the named
construction field for field (a field added to ``AccessContext`` without updating them fails here)."""

from hicache_mooncake.tiers.policy.base import AccessContext, ObjectType
from hicache_mooncake.tiers.policy.contexts import get_contexts, set_contexts


def test_set_contexts_chain_the_keys_after_the_stored_prefix():
    keys = ["k0", "k1", "k2"]
    got = set_contexts(keys, 5, "p4", [10, 20, 30], now=2.5, obj_type=ObjectType.MAMBA_STATE)
    want = [
        AccessContext(
            now=2.5,
            position=i,
            batch_len=3,
            prefix_hits=5,
            size=(10, 20, 30)[i],
            prev_key=prev,
            request_len=8,
            obj_type=ObjectType.MAMBA_STATE,
        )
        for i, prev in enumerate(["p4", "k0", "k1"])
    ]
    assert got == want
    assert all(type(c) is AccessContext for c in got)
    assert set_contexts([], 3, None) == []
    assert [c.size for c in set_contexts(keys, 0, None, 7)] == [7, 7, 7]


def test_get_contexts_mark_the_whole_run_as_hits():
    got = get_contexts(("a", "b"), 4096, request_len=9)
    want = [
        AccessContext(position=0, batch_len=2, prefix_hits=2, size=4096, prev_key=None, request_len=9),
        AccessContext(position=1, batch_len=2, prefix_hits=2, size=4096, prev_key="a", request_len=9),
    ]
    assert got == want
    assert got[1]._replace(promoted=True).promoted  # still a real named tuple
    assert get_contexts([]) == []
