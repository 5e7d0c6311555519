"""A ``secret_file`` that cannot be read fails the start with the key and the path (and the fix),
on the client side (``tiers.remote.secret_file``) and on a memory node (``node.secret_file``),
never with a bare ``FileNotFoundError``; nothing is left listening or open."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.store_builder import build_node_store, build_store
from hicache_mooncake.transport.node.config import NodeConfig
from hicache_mooncake.transport.node.server import NodeServer

MiB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client_config(secret_file: str, port: int) -> object:
    return validate_config(
        {
            "tiers": {
                "policy": "lru",
                "dram": {"capacity": "4MiB", "slab_size": "1MiB", "prefault": False},
                "remote": {"enabled": True, "timeout_s": 2.0, "secret_file": secret_file},
                "warm": {"enabled": False},
            },
            "metadata": {
                "backend": "embedded",
                "nodes": [{"node_id": "n", "host": "127.0.0.1", "port": port}],
            },
        }
    )


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_client_secret_file_that_cannot_be_read_names_the_key(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "no-such-secret"
    if kind == "directory":
        path.mkdir()
    with pytest.raises(ValueError) as err:
        build_store(_client_config(str(path), _free_port()), "rank0")  # type: ignore[arg-type]
    msg = str(err.value)
    assert not isinstance(err.value, OSError)
    assert "tiers.remote.secret_file" in msg and str(path) in msg, msg
    assert ("does not exist" if kind == "missing" else "is a directory") in msg, msg


def test_a_node_secret_file_that_is_missing_names_the_key_and_nothing_listens(tmp_path: Path) -> None:
    path = tmp_path / "node-secret"
    port = _free_port()
    cfg = NodeConfig(port=port, capacity=8 * MiB, slab_size=MiB, shm=False, secret_file=str(path))
    with pytest.raises(ValueError) as err:
        NodeServer(cfg, lambda spec: build_node_store(cfg, spec))
    msg = str(err.value)
    assert "node.secret_file" in msg and str(path) in msg and "does not exist" in msg, msg
    with socket.socket() as s:  # the port was never bound
        s.bind(("127.0.0.1", port))


def test_a_secret_file_that_exists_is_read_stripped(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("  s3cret\n")
    cfg = NodeConfig(port=0, capacity=8 * MiB, slab_size=MiB, shm=False, secret_file=str(path))
    assert cfg.secret() == b"s3cret"
