"""Who configures the host's cache (``host_cache.authority``): the running service's file wins, a
client is told each key on which it differs (both values, one line per key), ``auto`` never joins a
service with another remote provider or SSD path (except MLA at TP > 1, which must share, and says
so), and ``config validate --against-running`` prints the same lines offline."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from host_cache_procs import REPO, PrivateHostCache

from hicache_mooncake.config import validate_config
from hicache_mooncake.host_cache.mode import use_host_cache
from hicache_mooncake.store_builder import build_client_store

pytestmark = pytest.mark.integration


def _lines(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if f"{key}: this process's YAML says" in r.getMessage()]


def _start_default_service(hc: PrivateHostCache) -> Any:
    """The default preset's service (test-sized, private paths), started by a client; the client."""
    store = build_client_store(validate_config(hc.extra(host_cache="on")), "rank0", True)
    hc.wait_pid()
    return store


def test_a_client_asking_for_other_capacities_and_policy_is_told_each_key_with_both_values(
    host_cache: PrivateHostCache, caplog: pytest.LogCaptureFixture
) -> None:
    first = _start_default_service(host_cache)
    try:
        mine = validate_config(host_cache.extra(host_cache="auto", dram={"capacity": "16MiB"}, policy="lru"))
        caplog.set_level(logging.INFO)
        on, why = use_host_cache(mine, replicated_kv=False, tp_size=1)
        assert on, why  # same SSD path, no remote: auto joins, and says what it got
        second = build_client_store(mine, "rank0", True)
        try:
            [capacity] = _lines(caplog, "tiers.dram.capacity")
            assert str(16 << 20) in capacity and str(8 << 20) in capacity, capacity
            [policy] = _lines(caplog, "tiers.policy")
            assert "'lru'" in policy and "'reuse'" in policy, policy
            assert second.tiers[0].stats()["capacity_bytes"] == 8 << 20  # what it got: the service's
        finally:
            second.close()
    finally:
        first.close()


def test_a_mooncake_preset_process_next_to_a_default_service_keeps_its_pool_and_says_why(
    host_cache: PrivateHostCache, caplog: pytest.LogCaptureFixture
) -> None:
    first = _start_default_service(host_cache)
    try:
        base = yaml.safe_load((REPO / "configs" / "mooncake.yaml").read_text())
        mooncake = validate_config(host_cache.extra(base))
        assert mooncake.tiers.host_cache == "auto" and mooncake.tiers.remote.provider == "mooncake"
        caplog.set_level(logging.INFO)
        on, why = use_host_cache(mooncake, replicated_kv=False, tp_size=1)
        assert not on, why
        assert "in-process tiers" in why and "tiers.remote.enabled" in why and str(host_cache.socket) in why
        [remote] = _lines(caplog, "tiers.remote.enabled")
        assert "says True" in remote and "serves False" in remote, remote
        # on: joins as the service is, and the lines say so
        on_cfg = validate_config(host_cache.extra(base, host_cache="on"))
        assert use_host_cache(on_cfg, replicated_kv=False, tp_size=1)[0]
    finally:
        first.close()


def test_auto_with_another_ssd_path_stays_in_process_unless_mla_ranks_must_share(
    host_cache: PrivateHostCache, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _start_default_service(host_cache)
    try:
        other = validate_config(host_cache.extra(host_cache="auto", ssd={"path": str(tmp_path / "mine")}))
        caplog.set_level(logging.INFO)
        on, why = use_host_cache(other, replicated_kv=False, tp_size=1)
        assert not on and "tiers.ssd.path" in why, why
        [path] = _lines(caplog, "tiers.ssd.path")
        assert str(tmp_path / "mine") in path and str(host_cache.ssd_dir) in path, path
        on, why = use_host_cache(other, replicated_kv=True, tp_size=2)
        assert on and "MLA ranks must share" in why and "tiers.ssd.path" in why, why
    finally:
        first.close()


def test_an_operator_started_service_is_the_authority_and_validate_against_running_shows_it(
    host_cache: PrivateHostCache,
) -> None:
    operator_yaml = host_cache.write_yaml(host_cache.extra(host_cache="on"), "operator.yaml")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_mooncake", "host-cache", "--config", str(operator_yaml)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert host_cache.wait_pid() == proc.pid
        mine = host_cache.write_yaml(host_cache.extra(host_cache="auto", policy="lru"), "mine.yaml")
        out = subprocess.run(
            [sys.executable, "-m", "hicache_mooncake", "config", "validate", "--against-running", str(mine)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        text = out.stdout + out.stderr
        assert (
            "tiers.policy: this process's YAML says 'lru', the running host cache serves 'reuse'" in text
        ), text
        assert "auto (joined" in text, text
        assert f"pid {proc.pid}" in text, text
    finally:
        host_cache.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)
