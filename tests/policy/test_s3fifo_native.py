"""S3-FIFO on native ``KeyOrder`` queues decides as the OrderedDict version did (kept as the
reference model, ``s3fifo_reference.py``): seeded random streams of sets (single and batched,
ghosts and residents among them), hits, removals, evictions and clears give the same victims,
the same residents and the same queue contents in the same order after every call."""

from __future__ import annotations

import random

import pytest

from hicache_mooncake.tiers.policy.base import DEFAULT_CONTEXT
from hicache_mooncake.tiers.policy.s3fifo import S3FifoPolicy

from .s3fifo_reference import RefS3FifoPolicy


def _queues(policy: S3FifoPolicy | RefS3FifoPolicy) -> tuple[object, ...]:
    if isinstance(policy, RefS3FifoPolicy):
        freq = policy._freq
        return (
            [(k, freq[k]) for k in policy._small],
            [(k, freq[k]) for k in policy._main],
            list(policy._ghost),
        )
    return policy._small.items(), policy._main.items(), policy._ghost.keys()


@pytest.mark.parametrize(("small_ratio", "threshold"), [(0.1, 1), (0.3, 2), (0.5, 1)])
def test_native_queues_decide_as_the_reference(small_ratio: float, threshold: int) -> None:
    for seed in range(4):
        rng = random.Random(seed)
        native = S3FifoPolicy(small_ratio, threshold)
        ref = RefS3FifoPolicy(small_ratio, threshold)
        universe = [f"k{i}" for i in range(rng.choice((40, 200)))]
        for step in range(3000):
            op = rng.random()
            if op < 0.3:
                key = rng.choice(universe)
                assert native.on_set(key) == ref.on_set(key)
            elif op < 0.45:
                if rng.random() < 0.5:  # the usual batch: new keys
                    fresh = [k for k in universe if k not in ref and k not in ref._ghost]
                    keys = rng.sample(fresh, min(len(fresh), rng.randint(1, 12)))
                else:
                    keys = [rng.choice(universe) for _ in range(rng.randint(1, 12))]
                ctxs = [DEFAULT_CONTEXT] * len(keys)
                assert native.on_set_batch(keys, ctxs) == ref.on_set_batch(keys, ctxs)
            elif op < 0.65:
                key = rng.choice(universe)
                native.on_hit(key)
                ref.on_hit(key)
            elif op < 0.72:
                key = rng.choice(universe)
                native.on_remove(key)
                ref.on_remove(key)
            elif op < 0.999:
                for _ in range(rng.randint(1, 4)):
                    assert native.pop_victim() == ref.pop_victim(), (seed, step)
            else:
                native.clear()
                ref.clear()
            assert len(native) == len(ref)
            assert _queues(native) == _queues(ref), (seed, step)
        assert all((k in native) == (k in ref) for k in universe)
