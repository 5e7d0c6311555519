"""``hicache-mooncake demo-share`` (issue 47 item 5), run as a user runs it (a real process): a TP=1
instance and a TP=2 pair share a prefix through one host cache, each rank finds every page and
reads exactly its heads, both ways; the events subscriber prints what the service published; and
nothing it started outlives it (service process, shm and temporary directories)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGES = 8


def test_demo_share_two_tp_sizes_share_a_prefix_both_ways_and_events_are_printed(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("HICACHE_MOONCAKE_CONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "hicache_mooncake", "demo-share", "--pages", str(PAGES)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    n = f"{PAGES}/{PAGES}"
    for rank, heads in ((0, "0-1"), (1, "2-3")):
        assert f"TP=2 rank {rank}: hits {n}, read {n}, heads {heads} byte-exact {n}" in out, out
        assert f"TP=2 rank {rank}: stored {n} pages" in out, out
    assert f"TP=1: stored {n} pages" in out, out
    assert f"TP=1: hits {n}, read {n}, all 4 heads byte-exact {n}" in out, out
    assert "result: OK, every page found and byte-exact both ways" in out, out
    events = [line for line in out.splitlines() if line.lstrip().startswith("[events]")]
    assert any(re.search(rf"BlockStored {PAGES} blocks medium=\S+", line) for line in events), out

    # cleanup: the service it started is gone, and so are its shm and temporary directories
    pid = int(re.search(r"host cache service pid (\d+) stopped", out).group(1))  # type: ignore[union-attr]
    assert not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text(), pid
    paths = re.search(r"socket/lock/log in (\S+), DRAM arena in (\S+),", out)
    assert paths is not None, out
    for path in paths.groups():
        assert not Path(path).exists(), path
    assert list(tmp_path.iterdir()) == []
