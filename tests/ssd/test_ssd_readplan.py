"""The read planner (columns, one sort) against the per-entry planner it replaced, kept here as
the reference model: the same runs (region, first offset, entries in order) for seeded batches
of entries that lie back to back, with gaps, in several regions, repeated, and larger than a
run."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hicache_mooncake.ssd.format import entry_size
from hicache_mooncake.ssd.index import Columns
from hicache_mooncake.ssd.readplan import entry_sizes, plan_runs


def reference_runs(
    entries: list[tuple[int, int, int, int]], max_run_bytes: int
) -> list[tuple[int, int, list[int]]]:
    """``entries``: (batch position, region, offset, payload length). The runs as the per-entry
    planner made them: per region (first appearance), entries by offset (stable), a new run where
    the next entry does not start at the run's end or would take it past ``max_run_bytes``."""
    by_region: dict[int, list[tuple[int, int, int, int]]] = {}
    for e in entries:
        by_region.setdefault(e[1], []).append(e)
    runs: list[tuple[int, int, list[int]]] = []
    for lst in by_region.values():
        lst.sort(key=lambda e: e[2])
        cur: tuple[int, int, list[int]] | None = None
        nbytes = 0
        for pos, region, off, length in lst:
            size = entry_size(length)
            if cur is None or off != cur[1] + nbytes or nbytes + size > max_run_bytes:
                cur = (region, off, [])
                runs.append(cur)
                nbytes = 0
            cur[2].append(pos)
            nbytes += size
    return runs


def _columns(entries: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, Columns]:
    u64 = lambda xs: np.array(xs, np.uint64)  # noqa: E731
    idx = np.array([e[0] for e in entries], np.int64)
    n = len(entries)
    return idx, Columns(
        region=u64([e[1] for e in entries]),
        gen=u64(range(n)),
        offset=u64([e[2] for e in entries]),
        length=u64([e[3] for e in entries]),
        seq=u64(range(100, 100 + n)),
    )


@pytest.mark.parametrize("seed", range(20))
def test_the_planner_makes_the_runs_the_per_entry_planner_made(seed: int) -> None:
    rng = random.Random(seed)
    entries: list[tuple[int, int, int, int]] = []
    ends: dict[int, int] = {}
    for pos in range(rng.randrange(1, 300)):
        region = rng.randrange(4)
        length = rng.choice([1, 4095, 4096, 4097, 65536, 1 << 20, rng.randrange(1, 1 << 21)])
        off = ends.get(region, 4096)
        if rng.random() < 0.2:
            off += 4096 * rng.randrange(1, 4)  # a gap: an entry not read between them
        if rng.random() < 0.05 and entries:
            _, region, off, length = rng.choice(entries)  # the same entry asked twice
        else:
            ends[region] = off + entry_size(length)
        entries.append((pos, region, off, length))
    rng.shuffle(entries)
    max_run = rng.choice([1 << 20, 4 << 20, 16 << 20])
    idx, cols = _columns(entries)
    plan = plan_runs(idx, cols, max_run)

    got = []
    for j in range(plan.runs):
        lo, hi = plan.run_first[j], plan.run_first[j + 1]
        assert hi > lo and int(plan.fields.offset[lo]) == plan.run_offset[j]
        assert set(plan.fields.region[lo:hi].tolist()) == {plan.run_region[j]}
        got.append((plan.run_region[j], plan.run_offset[j], plan.idx[lo:hi].tolist()))
    assert plan.run_first[0] == 0 and plan.run_first[-1] == len(entries)
    assert sorted(got) == sorted(reference_runs(entries, max_run))
    # every field travelled with its entry
    where = {pos: k for k, pos in enumerate(plan.idx.tolist())}
    for pos, region, off, length in entries:
        k = where[pos]
        assert (int(plan.fields.region[k]), int(plan.fields.offset[k]), int(plan.fields.length[k])) == (
            region, off, length,
        )  # fmt: skip


def test_entry_sizes_are_the_format_s() -> None:
    lengths = [0, 1, 4095, 4096, 4097, 1 << 20, (1 << 40) - 1]
    assert entry_sizes(np.array(lengths, np.uint64)).tolist() == [entry_size(n) for n in lengths]
