"""Issue 8, item 7: the ``local`` engine maps only arenas it can prove are the node's.

A hostile node process (``fake_node.py``: knows the secret, speaks the protocol, grants every
ALLOC at offset 0) names a file of its choosing in its handshake. Whatever it names (a file outside
the shm directory, a symlink or a hard link in it, a foreign file with an arena-like name, the real
arena of another node, or that arena with a stolen node id and epoch), the client writes nothing
into it and the put fails. A real node's arena, in the directory the client is configured with,
still works (and the conformance suite runs every test over ``local`` too)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from transport_procs import SECRET, NodeProc

from hicache_mooncake.transport import ClientOptions, NodeClient

pytestmark = pytest.mark.integration
FAKE_NODE = Path(__file__).with_name("fake_node.py")
SIZE = 1 << 20
OPTS = ClientOptions(timeout_s=1.0, connect_timeout_s=1.0, secret=SECRET.encode())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_node(tmp_path: Path) -> Iterator[Callable[..., int]]:
    """Start fake nodes that advertise ``shm_path`` (and optionally an identity); killed by PID."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(shm_path: Path, size: int = SIZE, identity: tuple[str, int, str] | None = None) -> int:
        ready = tmp_path / f"fake-{len(procs)}.port"
        extra = [identity[0], str(identity[1]), identity[2]] if identity else []
        proc = subprocess.Popen(
            [sys.executable, str(FAKE_NODE), str(ready), SECRET, str(shm_path), str(size), *extra]
        )
        procs.append(proc)
        deadline = time.monotonic() + 15
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "fake node did not start"
            time.sleep(0.02)
        return int(ready.read_text())

    try:
        yield start
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(5)


@pytest.fixture
def shm_names() -> Iterator[Callable[[str], Path]]:
    """Unique paths directly in /dev/shm (the client's default directory), removed afterwards."""
    made: list[Path] = []

    def name(kind: str) -> Path:
        path = Path("/dev/shm") / f"hicache-node-{kind}-{uuid.uuid4().hex[:12]}-1-1"
        made.append(path)
        return path

    try:
        yield name
    finally:
        for p in made:
            p.unlink(missing_ok=True)


def put_through(port: int, opts: ClientOptions = OPTS) -> tuple[list[bool], NodeClient]:
    client = NodeClient("127.0.0.1", port, opts, "local")
    try:
        return client.put_batch([("kv-page", [memoryview(os.urandom(8192))])]), client
    finally:
        client.close()


def victim_file(path: Path) -> Path:
    path.write_bytes(os.urandom(SIZE))
    return path


CASES = ["outside_shm_dir", "symlink", "hardlink", "foreign_file"]


@pytest.mark.parametrize("case", CASES)
def test_a_fake_node_naming_another_file_gets_nothing_written(
    case: str, tmp_path: Path, shm_dir: Path, shm_names: Callable[[str], Path], fake_node: Callable[..., int]
) -> None:
    if case == "outside_shm_dir":  # any file of the client's user, e.g. in its home or /tmp
        victim = named = victim_file(tmp_path / "precious.bin")
    elif case == "symlink":  # a link in the shm directory pointing at such a file
        victim = victim_file(tmp_path / "precious.bin")
        named = shm_names("link")
        named.symlink_to(victim)
    elif case == "hardlink":  # a second name, in the shm directory, of a file on the same tmpfs
        victim = victim_file(shm_dir / "precious.bin")
        named = shm_names("hardlink")
        os.link(victim, named)
    else:  # another program's shared memory, with an arena-like name but no arena header
        victim = named = victim_file(shm_names("foreign"))
    before = digest(victim)
    ok, client = put_through(fake_node(named))
    assert ok == [False]
    assert digest(victim) == before, "the client wrote into a file the node named"
    assert client.counters["segment_refused"] >= 1


@pytest.mark.parametrize("identity", ["fake_id", "stolen_id_and_epoch"])
def test_a_fake_node_naming_a_real_arena_gets_nothing_written(
    identity: str, tmp_path: Path, fake_node: Callable[..., int]
) -> None:
    real = NodeProc(tmp_path, f"real-{uuid.uuid4().hex[:8]}", None, "t", capacity="4MiB").start()
    try:
        good = NodeClient("127.0.0.1", real.port, OPTS, "local")
        page = os.urandom(8192)
        assert good.put_batch([("real-page", [memoryview(page)])]) == [True]
        conn = good.pool.acquire(time.monotonic() + 1)
        seg = dict(conn.segment)
        good.pool.release(conn, True)
        arena = Path(seg["shm_path"])
        before = digest(arena)
        # the fake does not know the arena token (it never read the file or the real handshake)
        who = ("fake", 1, "00" * 16) if identity == "fake_id" else (seg["node_id"], seg["epoch"], "00" * 16)
        ok, client = put_through(fake_node(arena, seg["arena_size"], who))
        assert ok == [False]
        assert digest(arena) == before
        assert client.counters["segment_refused"] >= 1
        out = bytearray(8192)
        assert good.get_batch_into([("real-page", [memoryview(out)])]) == [True] and out == page
        good.close()
    finally:
        real.stop()


def test_local_maps_only_arenas_in_its_configured_shm_dir(tmp_path: Path, shm_dir: Path) -> None:
    node = NodeProc(tmp_path, "dir-node", None, "t", capacity="4MiB", node={"shm_dir": str(shm_dir)}).start()
    try:
        page = os.urandom(8192)
        # a client configured with the node's directory maps its arena and moves bytes through it
        same = ClientOptions(timeout_s=1.0, secret=SECRET.encode(), shm_dir=str(shm_dir))
        ok, client = put_through(node.port, same)
        assert ok == [True] and client.counters["segment_refused"] == 0
        c = NodeClient("127.0.0.1", node.port, same, "local")
        assert c.put_batch([("p", [memoryview(page)])]) == [True]
        out = bytearray(8192)
        assert c.get_batch_into([("p", [memoryview(out)])]) == [True] and out == page
        c.close()
        # a client configured with another directory refuses it (default /dev/shm)
        ok, client = put_through(node.port)
        assert ok == [False] and client.counters["segment_refused"] == 1
    finally:
        node.stop()
