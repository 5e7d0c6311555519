"""Striping over tcp: a large batch travels on several pooled connections at once (the node serves
each on its own thread), every object arrives intact, and a stripe that fails misses only its own
objects; a small batch stays on one connection. Against a real node process on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from transport_procs import SECRET, NodeProc

from hicache_mooncake.transport import ClientOptions, NodeClient

pytestmark = pytest.mark.integration
KiB = 1 << 10


def _opts(**kw: float) -> ClientOptions:
    base: dict[str, float] = {"stripe_min_bytes": 64 * KiB, "max_stripes": 4, "connections_per_peer": 4}
    base.update(kw)
    return ClientOptions(timeout_s=10.0, secret=SECRET.encode(), **base)  # type: ignore[arg-type]


def _items(vals: dict[str, bytearray]) -> list[tuple[str, list[memoryview]]]:
    return [(k, [memoryview(v)]) for k, v in vals.items()]


def test_a_large_batch_is_striped_and_round_trips(make_node: Callable[..., NodeProc]) -> None:
    node = make_node("striped", capacity="64MiB")
    client = NodeClient("127.0.0.1", node.port, _opts())
    try:
        small = {"s": bytearray(os.urandom(16 * KiB))}
        assert client.put_batch(_items(small)) == [True]
        assert client.stats()["node"]["connections"] == 1  # below the striping threshold
        used = 1
        for rnd in range(5):
            vals = {f"r{rnd}-{i}": bytearray(os.urandom(96 * KiB + i)) for i in range(24)}
            assert all(client.put_batch(_items(vals)))
            outs = {k: bytearray(len(v)) for k, v in vals.items()}
            assert all(client.get_batch_into(_items(outs)))
            assert outs == vals
            used = max(used, client.stats()["node"]["connections"])
        assert used >= 2, "a large batch never used a second connection"
        assert used <= 4
    finally:
        client.close()


def test_a_failed_stripe_misses_only_its_own_objects(make_node: Callable[..., NodeProc]) -> None:
    """The node refuses a request whose body is over its ``max_payload``: the stripe holding the
    oversized object stops there, the other stripes are stored (one connection would have lost
    everything after it). (No pause after the failed connection, so the other stripes are not
    refused by the client's own short "peer down" mark.)"""
    node = make_node("limited", capacity="64MiB", node={"max_payload": 64 * KiB})
    client = NodeClient("127.0.0.1", node.port, _opts(stripe_min_bytes=96 * KiB, retry_interval_s=0))
    try:
        vals = {f"k{i}": bytearray(os.urandom(32 * KiB)) for i in range(16)}
        vals["k0"] = bytearray(os.urandom(128 * KiB))  # first object of the first stripe: refused
        res = client.put_batch(_items(vals))
        assert res[0] is False
        assert all(res[8:]), res  # later stripes, on their own connections, were stored
        outs = {k: bytearray(len(v)) for k, v in vals.items() if k != "k0"}
        got = client.get_batch_into(_items(outs))
        stored = [k for k, ok in zip(outs, got, strict=True) if ok]
        assert set(stored) >= {f"k{i}" for i in range(8, 16)}
        assert all(outs[k] == vals[k] for k in stored)
    finally:
        client.close()


@pytest.mark.parametrize(("cpus", "stripes"), [({0}, 1), ({0, 1}, 2), ({2, 5, 7}, 3), (set(range(16)), 4)])
def test_default_stripes_follow_the_cpus_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch, cpus: set[int], stripes: int
) -> None:
    """One stripe thread per usable core (a container's cpuset, not the host's count), at most 4."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: cpus)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert ClientOptions().max_stripes == stripes
    assert ClientOptions(max_stripes=3).max_stripes == 3  # an explicit setting stands
