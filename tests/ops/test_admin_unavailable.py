"""Another local user cannot stop SGLang from starting through the admin endpoint: when the
generated token's private directory is unsafe (planted with a mode others can write, as
``/tmp/hicache-mooncake-<uid>`` can be) or its token file is, a backend whose endpoint is on by
default (port 0) still attaches, serves pages, logs one ERROR naming the problem and the fix, and
its stats say the endpoint is unavailable. What the operator set explicitly stays fatal: a fixed
port that is taken, a host off loopback without a token."""

from __future__ import annotations

import logging
import os
import socket

import pytest
import torch
from admin_backend_helpers import PS, backend_of, page_hashes, store_pages

pytestmark = pytest.mark.sglang


def round_trip(backend, host) -> None:  # type: ignore[no-untyped-def]
    """The data path works: pages set from the host pool are read back, byte for byte."""
    pages = page_hashes(3)
    src = store_pages(backend, host, pages)
    for i in range(len(pages)):
        host.get_data_page(int(src[i * PS]), flat=True).random_(0, 100)
    data = [host.get_data_page(int(src[i * PS]), flat=True).clone() for i in range(len(pages))]
    assert all(backend.batch_set_v1(page_hashes(3, "b"), src))
    dst = host.alloc(len(pages) * PS)
    assert backend.batch_get_v1(page_hashes(3, "b"), dst) == [True] * 3
    for i, page in enumerate(data):
        assert torch.equal(host.get_data_page(int(dst[i * PS]), flat=True), page)


def test_a_planted_runtime_dir_does_not_stop_the_attach(tmp_path, monkeypatch, caplog):
    runtime = tmp_path / "run"
    planted = runtime / "hicache-mooncake"  # the default discovery dir's parent, planted 0777
    planted.mkdir(parents=True)
    os.chmod(planted, 0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("HICACHE_MOONCAKE_ADMIN_TOKEN", raising=False)
    caplog.set_level(logging.ERROR)
    backend, host = backend_of(tmp_path, admin={"port": 0})  # the presets' default: no token, port 0
    try:
        assert backend.admin is None
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "admin endpoint NOT started" in errors[0], errors
        assert str(planted) in errors[0] and "writable by others" in errors[0] and "Fix:" in errors[0]
        assert "writable by others" in backend.tier_stats()["admin"]["unavailable"]
        round_trip(backend, host)
    finally:
        backend.close()


def test_an_unsafe_generated_token_file_does_not_stop_the_attach(tmp_path, monkeypatch, caplog):
    disc = tmp_path / "disc"
    disc.mkdir(mode=0o700)
    (disc / "admin.token").write_text("readable-by-all\n")
    os.chmod(disc / "admin.token", 0o644)
    monkeypatch.delenv("HICACHE_MOONCAKE_ADMIN_TOKEN", raising=False)
    caplog.set_level(logging.ERROR)
    backend, host = backend_of(tmp_path, admin={"port": 0, "discovery_dir": str(disc)})
    try:
        assert backend.admin is None and "mode 0600" in backend.tier_stats()["admin"]["unavailable"]
        assert any("admin endpoint NOT started" in r.getMessage() for r in caplog.records)
        round_trip(backend, host)
    finally:
        backend.close()


def test_what_the_operator_set_explicitly_stays_fatal(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"admin.port {port}"):
            backend_of(tmp_path / "a", admin={"port": port, "token_file": str(tmp_path / "a" / "token")})
    finally:
        taken.close()
    with pytest.raises(RuntimeError, match="not loopback"):
        backend_of(
            tmp_path / "b", admin={"port": 0, "host": "0.0.0.0", "token_env": "HICACHE_TEST_NO_SUCH_VAR"}
        )
