"""``pid_alive``: dead means gone or a zombie (the node-arena collector and the host-cache tests
rely on it), and nothing it cannot prove dead is called dead."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hicache_mooncake.transport.processes import pid_alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except FileNotFoundError:
        return ""


def test_a_live_process_is_alive_and_group_pids_are_never_called_dead() -> None:
    assert pid_alive(os.getpid())
    assert pid_alive(1)  # init: another user's process (EPERM for non-root) still exists
    assert pid_alive(0) and pid_alive(-1)


def test_an_exited_child_is_dead_before_and_after_it_is_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.pid) == "Z"  # exited, not yet waited for: a zombie
        assert not pid_alive(child.pid)
    finally:
        child.wait(timeout=30)
    assert not pid_alive(child.pid)
