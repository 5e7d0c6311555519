"""A failed attach (through SGLang's factory) names the YAML key and leaves nothing running:
no thread, no open file, nothing allocated that outlives the error."""

from __future__ import annotations

import os
import threading

import pytest
from sglang_helpers import make_backend, small_extra, threads_started_since

pytestmark = [pytest.mark.sglang, pytest.mark.integration]


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize(
    ("tiers", "key"),
    [
        ({"policy_options": {"no_such_option": 1}}, "tiers.policy_options"),
        ({"policy": "reuse", "policy_options": {"horizon": -1}}, "tiers.policy_options"),
    ],
)
def test_bad_policy_options_fail_the_attach_with_the_key_and_leak_nothing(tmp_path, tiers, key):
    extra = small_extra(
        ssd={"enabled": True, "path": str(tmp_path), "capacity": "8MiB", "region_size": "1MiB"}
    )
    extra["tiers"].update(tiers)
    make_backend(extra=small_extra())[0].close()  # SGLang's one-time imports and threads happen here
    threads, fds = set(threading.enumerate()), open_fd_count()
    with pytest.raises(Exception, match=key):
        make_backend(extra=extra)
    assert threads_started_since(threads) == []
    assert open_fd_count() == fds


def test_a_dram_tier_larger_than_the_host_is_refused_with_the_key_before_anything_is_allocated():
    make_backend(extra=small_extra())[0].close()
    threads, fds = set(threading.enumerate()), open_fd_count()
    with pytest.raises(Exception, match=r"tiers.dram.capacity: 1024.0TiB is more than this host lets"):
        make_backend(extra=small_extra(dram={"capacity": "1024TiB"}))
    assert threads_started_since(threads) == [] and open_fd_count() == fds


def test_an_unreachable_redis_at_attach_is_logged_with_its_key_and_local_tiers_keep_serving(caplog):
    from transport_procs import free_port

    port = free_port()  # nothing listens there
    extra = small_extra(remote={"enabled": True})
    extra["metadata"] = {"backend": "redis", "url": f"redis://127.0.0.1:{port}/0", "timeout_s": 0.2}
    with caplog.at_level("WARNING", logger="hicache_mooncake"):
        backend, host = make_backend(extra=extra)
    try:
        text = caplog.text
        assert f"metadata service unreachable at attach: redis://127.0.0.1:{port}/0 (metadata.url)" in text
        idx = host.alloc(2 * host.page_size)
        assert backend.batch_set_v1(["a" * 64, "b" * 64], idx) == [True, True]  # DRAM still serves
        assert backend.batch_exists(["a" * 64, "b" * 64]) == 2
    finally:
        backend.close()
