"""Issue 8, item 10: a killed node's shared-memory arena does not outlive the next start of a node
with its id, ``hicache-mooncake node --gc`` removes stale arenas by hand, and the arena of a live
node is never removed. Real node processes, SIGKILL, arena files on the real /dev/shm tmpfs (in a
directory of the test's own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from transport_procs import SECRET, NodeProc, node_command, node_env

from hicache_mooncake.transport import ClientOptions, NodeClient

pytestmark = pytest.mark.integration


def start(tmp: Path, name: str, shm_dir: Path) -> NodeProc:
    tmp.mkdir(parents=True, exist_ok=True)
    return NodeProc(tmp, name, None, "t", capacity="4MiB", node={"shm_dir": str(shm_dir)}).start()


def serves_locally(node: NodeProc, shm_dir: Path) -> bool:
    """A put and get through the node's mapped arena (engine local) round-trip the bytes."""
    opts = ClientOptions(timeout_s=2.0, secret=SECRET.encode(), shm_dir=str(shm_dir))
    c = NodeClient("127.0.0.1", node.port, opts, "local")
    try:
        page = os.urandom(8192)
        key = f"probe-{os.urandom(4).hex()}"
        out = bytearray(8192)
        return c.put_batch([(key, [memoryview(page)])]) == [True] and (
            c.get_batch_into([(key, [memoryview(out)])]) == [True] and out == page
        )
    finally:
        c.close()


def gc_by_hand(tmp: Path, shm_dir: Path) -> subprocess.CompletedProcess[str]:
    cfg = tmp / "gc.yaml"
    cfg.write_text(yaml.safe_dump({"node": {"shm_dir": str(shm_dir)}}))
    cmd = [*node_command(cfg), "--gc"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=node_env(None))


def test_a_killed_nodes_arena_is_removed_when_its_node_id_starts_again(tmp_path: Path, shm_dir: Path) -> None:
    node = start(tmp_path, "crashy", shm_dir)
    try:
        first_pid = node.pid
        [arena] = node.arenas(first_pid)
        node.stop(signal.SIGKILL, keep_arena=True)
        assert arena.exists()  # nobody unlinked it: this is the leak
        node.start()  # same node id, new process
        assert not arena.exists()
        assert [p.name.split("-")[3] for p in node.arenas()] == [str(node.pid)]
        assert serves_locally(node, shm_dir)
    finally:
        node.stop()


def test_starting_a_node_never_removes_the_arena_of_a_live_node_with_its_id(
    tmp_path: Path, shm_dir: Path
) -> None:
    live = start(tmp_path / "a", "twin", shm_dir)
    try:
        [arena] = live.arenas(live.pid)
        twin = start(tmp_path / "b", "twin", shm_dir)  # misconfigured duplicate id
        try:
            assert arena.exists()
            assert len(live.arenas()) == 2
            assert serves_locally(live, shm_dir) and serves_locally(twin, shm_dir)
        finally:
            twin.stop()
        assert arena.exists() and serves_locally(live, shm_dir)
    finally:
        live.stop()


def test_gc_by_hand_removes_only_provably_dead_arenas(tmp_path: Path, shm_dir: Path) -> None:
    dead = [start(tmp_path / n, n, shm_dir) for n in ("dead-a", "dead-b", "held")]
    live = start(tmp_path / "live", "live", shm_dir)
    holder = None
    try:
        dead_arenas = {}
        for n in dead:
            [dead_arenas[n.name]] = n.arenas(n.pid)
            n.stop(signal.SIGKILL, keep_arena=True)
        [live_arena] = live.arenas(live.pid)
        # a process that still holds the lock of a dead pid's arena (as a live node in another pid
        # namespace sharing this /dev/shm would): the lock, not the pid, says it is alive
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
                "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(120)",
                str(dead_arenas["held"]),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        # things with arena-like names that are not provably arenas
        decoy = shm_dir / "hicache-node-decoy-1-1"
        decoy.write_bytes(os.urandom(8192))
        link = shm_dir / "hicache-node-link-1-1"
        target = tmp_path / "linked.bin"
        target.write_bytes(os.urandom(8192))
        link.symlink_to(target)

        res = gc_by_hand(tmp_path, shm_dir)
        assert res.returncode == 0, res.stderr
        assert not dead_arenas["dead-a"].exists() and not dead_arenas["dead-b"].exists()
        assert str(dead_arenas["dead-a"]) in res.stdout and str(dead_arenas["dead-b"]) in res.stdout
        assert "2 stale arena(s) removed" in res.stdout
        assert dead_arenas["held"].exists()
        assert live_arena.exists() and serves_locally(live, shm_dir)
        assert decoy.exists() and link.is_symlink() and target.exists()

        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        holder = None
        res = gc_by_hand(tmp_path, shm_dir)
        assert res.returncode == 0 and "1 stale arena(s) removed" in res.stdout
        assert not dead_arenas["held"].exists()
        assert live_arena.exists() and serves_locally(live, shm_dir)
    finally:
        if holder is not None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(5)
        live.stop()
