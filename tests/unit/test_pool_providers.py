"""The remote tier above its providers: the provider option and the Mooncake keys in the YAML,
the deadline guard (real threads, real blocking calls), registered-memory lookups."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hicache_mooncake.config import ConfigError, load_backend_config
from hicache_mooncake.presets import load_preset
from hicache_mooncake.tiers.call_guard import CallGuard
from hicache_mooncake.tiers.pool_providers import PoolUnavailable, make_provider, provider_names
from hicache_mooncake.tiers.pool_providers.mooncake import MooncakeProvider
from hicache_mooncake.tiers.pool_providers.registered import RegisteredRanges, address_of


def _remote(**remote: object) -> dict[str, object]:
    return {"tiers": {"remote": {"enabled": True, **remote}}}


def test_provider_option_and_mooncake_keys_reach_the_provider() -> None:
    cfg = load_backend_config(
        _remote(
            provider="mooncake",
            timeout_s=1.5,
            mooncake={
                "master": "etcd://10.0.0.5:2379;10.0.0.6:2379",
                "segment_size": "1GiB",
                "local_buffer_size": "32MiB",
                "replica_num": 2,
                "protocol": "rdma",
                "device_names": "mlx5_0",
                "put_timeout_s": 1.0,
            },
        )
    )
    remote = cfg.tiers.remote
    assert remote.provider == "mooncake" and remote.mooncake.segment_size == 1 << 30
    provider = make_provider("mooncake", remote, cfg.metadata)
    assert isinstance(provider, MooncakeProvider) and provider.blocking
    setup = provider.setup_config()
    assert setup["master_server_addr"] == "etcd://10.0.0.5:2379;10.0.0.6:2379"
    assert setup["global_segment_size"] == 1 << 30 and setup["local_buffer_size"] == 32 << 20
    assert setup["protocol"] == "rdma" and setup["rdma_devices"] == "mlx5_0"
    assert setup["metadata_server"] == "P2PHANDSHAKE"
    assert provider.deadline_s("put", 1.5) == 1.0 and provider.deadline_s("get", 1.5) == 1.5
    assert set(provider_names()) >= {"nodes", "mooncake"}


@pytest.mark.parametrize(
    ("mooncake", "needle"),
    [
        ({"master": "redis://127.0.0.1:6379"}, "tiers.remote.mooncake.master"),
        ({"master": "nohost"}, "tiers.remote.mooncake.master"),
        ({"metadata_server": "redis://127.0.0.1:6379"}, "tiers.remote.mooncake.metadata_server"),
        ({"protocol": "udp"}, "tiers.remote.mooncake.protocol"),
        ({"replica_num": 0}, "tiers.remote.mooncake.replica_num"),
        ({"get_timeout_s": 9.0}, "exceeds timeout_s"),
        ({"segmentsize": 1}, "tiers.remote.mooncake.segmentsize"),
    ],
)
def test_bad_mooncake_keys_are_refused_by_path(mooncake: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_backend_config(_remote(provider="mooncake", mooncake=mooncake))
    assert needle in str(info.value)


def test_the_mooncake_preset_is_a_mooncake_cluster() -> None:
    cfg = load_backend_config(load_preset("mooncake"))
    assert cfg.tiers.remote.enabled and cfg.tiers.remote.provider == "mooncake"
    assert cfg.tiers.remote.mooncake.metadata_server == "P2PHANDSHAKE"
    assert cfg.tiers.remote.mooncake.replica_num == 2


def test_guard_answers_within_the_deadline_then_short_circuits_until_the_probe_succeeds() -> None:
    release = threading.Event()
    pool_back = threading.Event()
    guard = CallGuard(probe=pool_back.is_set, workers=2, retry_interval_s=0.05)
    try:
        start = time.monotonic()
        assert guard.call(lambda: release.wait(30) and [True], deadline_s=0.2) is None  # stuck call
        assert time.monotonic() - start < 2.0
        assert guard.is_open
        calls: list[int] = []
        start = time.monotonic()
        assert guard.call(lambda: calls.append(1) or [True], deadline_s=5) is None  # not even called
        assert time.monotonic() - start < 0.5 and calls == []
        pool_back.set()
        deadline = time.monotonic() + 5
        while guard.is_open and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not guard.is_open
        assert guard.call(lambda: [True], deadline_s=5) == [True]
        stats = guard.stats()
        assert stats["timeouts"] == 1 and stats["short_circuited"] == 1 and stats["probes"] >= 1
    finally:
        release.set()
        guard.close()


def test_guard_opens_on_pool_unavailable_and_never_queues_past_its_workers() -> None:
    release = threading.Event()
    guard = CallGuard(probe=lambda: False, workers=1, retry_interval_s=10)
    try:

        def unavailable() -> list[bool]:
            raise PoolUnavailable("master gone")

        assert guard.call(unavailable, deadline_s=1) is None and guard.is_open
    finally:
        guard.close()
    guard = CallGuard(probe=lambda: True, workers=1, retry_interval_s=10)
    try:
        blocker = threading.Thread(target=lambda: guard.call(lambda: release.wait(30), deadline_s=30))
        blocker.start()
        time.sleep(0.2)
        start = time.monotonic()
        assert guard.call(lambda: [True], deadline_s=5) is None  # the one worker is busy
        assert time.monotonic() - start < 0.5 and guard.stats()["saturated"] == 1
    finally:
        release.set()
        blocker.join(5)
        guard.close()


def test_registered_ranges_decide_zero_copy_per_part() -> None:
    pool = np.zeros(1 << 16, dtype=np.uint8)
    other = np.zeros(4096, dtype=np.uint8)
    ranges = RegisteredRanges()
    assert ranges.add(address_of(pool.data), pool.nbytes)
    assert not ranges.add(address_of(pool[100:].data), 10)  # overlaps: refused
    inside, outside = pool[4096:8192].data, other.data
    assert ranges.covers(address_of(inside), inside.nbytes)
    assert not ranges.covers(address_of(outside), outside.nbytes)
    assert not ranges.covers(address_of(pool[-10:].data), 20)  # runs past the end
    assert address_of(memoryview(pool.tobytes())) != 0  # read-only views have addresses too
