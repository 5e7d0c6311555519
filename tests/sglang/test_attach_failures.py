"""A failed attach (through SGLang's factory) names the YAML key and leaves nothing running:
no thread, no open file, nothing allocated that outlives the error."""

from __future__ import annotations

import os
import threading

import pytest
from sglang_helpers import make_backend, small_extra

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
    threads, fds = threading.active_count(), open_fd_count()
    with pytest.raises(Exception, match=key):
        make_backend(extra=extra)
    assert threading.active_count() == threads
    assert open_fd_count() == fds
