"""The admin endpoint against the clients an operator does not control (issue 48, items 3 and 5):
a token on loopback too (generated 0600 when the operator gave none, and read from the same place
by ``hicache-mooncake admin``), a bounded server (half-sent requests hold no threads, the token is
checked before any body byte is read), and a 4xx for every malformed request. Real sockets, a real
store behind the endpoint."""

from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from ops_helpers import TOKEN, small_config

from hicache_mooncake.admin.auth import TOKEN_FILE
from hicache_mooncake.admin.client import AdminClient, AdminError
from hicache_mooncake.admin.http_loop import Limits
from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.admin.tier_factory import TierFactory
from hicache_mooncake.cli import main
from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError

NO_ENV = "HICACHE_TEST_NO_SUCH_TOKEN_VAR"


@pytest.fixture
def serve(stores):  # type: ignore[no-untyped-def]
    """``serve(tmp_path, discovery, rank=0, token_file="", limits=None)``: an endpoint with no
    operator token unless ``token_file`` is given, over a real store; closed after the test."""
    servers: list[AdminServer] = []
    made = iter(range(1000))

    def make(tmp_path, discovery, rank=0, token_file="", limits=None):  # type: ignore[no-untyped-def]
        config = small_config(tmp_path / f"store{next(made)}")
        cfg = AdminConfig(port=0, token_file=token_file, token_env=NO_ENV, discovery_dir=str(discovery))
        context = AdminContext(
            stores(config), TierFactory(config, "rank0"), labels={"model": "m", "rank": str(rank)}
        )
        server = AdminServer(cfg, context, rank, limits)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def raw(url: str, data: bytes, timeout_s: float = 5.0, then_wait: bool = True) -> tuple[int, bytes]:
    """Send ``data`` as is on a new connection; the reply's status and body (0 when the server
    closed without one)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(data)
        got = b""
        while then_wait:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    if not got:
        return 0, b""
    status = int(got.split(b" ", 2)[1])
    return status, got.partition(b"\r\n\r\n")[2]


def test_without_an_operator_token_one_is_generated_0600_and_the_cli_reads_it(tmp_path, serve, capsys):
    discovery = tmp_path / "disc"
    first = serve(tmp_path, discovery, rank=0)
    second = serve(tmp_path, discovery, rank=1)
    token_file = discovery / TOKEN_FILE
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(discovery.stat().st_mode) == 0o700
    token = token_file.read_text().strip()
    assert len(token) >= 32 and first.token == second.token == token  # every rank of the user: one token
    for server in (first, second):
        with pytest.raises(AdminError) as err:
            AdminClient(server.url).freeze(True)  # loopback, no token: refused
        assert err.value.status == 401
        assert server.context.store.frozen is False
    assert main(["admin", "--discovery-dir", str(discovery), "show"]) == 0  # no --token-file needed
    out = capsys.readouterr().out
    assert "rank 0 (" in out and "rank 1 (" in out


def test_a_generated_token_others_could_read_or_replace_is_refused(tmp_path, serve):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o700)
    (loose / TOKEN_FILE).write_text("planted-token\n")
    os.chmod(loose / TOKEN_FILE, 0o644)
    with pytest.raises(ConfigError, match="must be a regular file .* mode 0600"):
        serve(tmp_path, loose)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        serve(tmp_path, shared)


def test_half_sent_requests_hold_no_threads_and_the_operator_is_still_served(tmp_path, serve):
    """Issue 48.5: 1,500 half-sent requests held 1,500 threads of SGLang's scheduler process."""
    server = serve(tmp_path, tmp_path / "disc", token_file=_token_file(tmp_path))
    client = AdminClient(server.url, TOKEN)
    client.show()
    before = threading.active_count()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    held = []
    try:
        for _ in range(300):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"POST /v1/freeze HTTP/1.1\r\nHost: x\r\nContent-Le")  # never finished
            held.append(sock)
        time.sleep(0.3)
        assert threading.active_count() <= before + Limits().workers
        assert server.open_connections() <= Limits().max_per_peer
        started = time.monotonic()
        assert client.freeze(True)["frozen"] is True  # the operator's request: served at once
        assert time.monotonic() - started < 2.0
    finally:
        for sock in held:
            sock.close()


def test_every_malformed_request_gets_a_4xx(tmp_path, serve):
    limits = Limits(header_timeout_s=1.0, body_timeout_s=0.5)
    server = serve(tmp_path, tmp_path / "disc", token_file=_token_file(tmp_path), limits=limits)
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()

    def post(headers: bytes, body: bytes = b"") -> bytes:
        return b"POST /v1/freeze HTTP/1.1\r\nHost: x\r\n" + auth + headers + b"\r\n" + body

    cases = [
        (post(b"Content-Length: -1\r\n"), 400, b"non-negative integer"),
        (post(b"Content-Length: ten\r\n"), 400, b"non-negative integer"),
        (post(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}"), 400, b"conflicting"),
        (post(b""), 411, b"Content-Length"),
        (post(b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n"), 411, b"chunked"),
        (post(b"Content-Length: 99999999999\r\n"), 413, b"over"),
        (post(b"Content-Length: 100\r\n", b'{"frozen": '), 400, b"shorter than its Content-Length"),
        (b"POST /v1/freeze HTTP/1.1\r\nHost: x\r\n", 408, b"did not arrive"),  # head never ends
        (b"HELLO\r\n\r\n", 400, b"request line"),
        (b"POST /v1/freeze HTTP/1.1\r\nno colon here\r\n\r\n", 400, b"header line"),
        (b"DELETE /v1/tiers HTTP/1.1\r\n" + auth + b"\r\n", 405, b"GET, POST"),
        (post(b"X-Pad: " + b"a" * (32 << 10) + b"\r\n"), 431, b"head is over"),
        (post(b"Content-Length: 5\r\n", b"[1,2]"), 400, b"JSON object"),
    ]
    for data, status, text in cases:
        got, body = raw(server.url, data)
        assert (got, text in body) == (status, True), (data[:80], got, body)
    assert server.context.store.frozen is False
    assert AdminClient(server.url, TOKEN).freeze(True)["frozen"] is True  # still serving


def test_a_wrong_token_is_refused_before_the_body_is_read(tmp_path, serve):
    server = serve(tmp_path, tmp_path / "disc", token_file=_token_file(tmp_path))
    head = b"POST /v1/attach HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 8000000\r\n\r\n"
    started = time.monotonic()
    status, body = raw(server.url, head)  # not one byte of the 8 MB body sent
    assert status == 401 and b"bearer token" in body
    assert time.monotonic() - started < 2.0


def _token_file(tmp_path):  # type: ignore[no-untyped-def]
    path = tmp_path / "operator.token"
    path.write_text(TOKEN + "\n")
    return str(path)


def test_a_second_os_user_can_neither_reach_the_endpoint_nor_read_its_token(tmp_path, serve):
    """Issue 48.3: with no token configured on loopback, another local user attached a remote pool
    of its own (the backend then served that user's bytes), froze the backend and detached its SSD
    tier. Here a real second OS user, in a forked process, tries all of it."""
    user = f"hcadm{os.getpid()}"
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", user], check=True, capture_output=True)
    try:
        pw = pwd.getpwnam(user)
        base = Path(tempfile.mkdtemp(prefix="hicache-admin-sec-"))  # /tmp: others may look in
        os.chmod(base, 0o755)
        try:
            _as_second_user(tmp_path, serve, pw, base)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    finally:
        subprocess.run(["userdel", user], check=False, capture_output=True)


def _as_second_user(tmp_path, serve, pw, base) -> None:  # type: ignore[no-untyped-def]
    server = serve(tmp_path, base / "admin")
    store = server.context.store
    tiers = [t.name for t in store.tiers]
    assert "ssd" in tiers
    pool = {
        "tier": "remote",
        "config": {
            "metadata": {"backend": "embedded", "nodes": [{"node_id": "x", "host": "127.0.0.1", "port": 1}]}
        },
    }
    attempts = {
        "attach": ("POST", "/v1/attach", pool),
        "freeze": ("POST", "/v1/freeze", {"frozen": True}),
        "detach": ("POST", "/v1/detach", {"tier": "ssd", "mode": "drop"}),
        "show": ("GET", "/v1/tiers", None),
    }
    with pytest.raises(AdminError):  # every module the child needs is imported before it loses /root
        AdminClient(server.url, timeout_s=5).request(*attempts["attach"])
    read_end, write_end = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the second user: no exec (the test's interpreter lives under /root)
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            seen: dict[str, object] = {}
            for name, (method, path, body) in attempts.items():
                try:
                    AdminClient(server.url, timeout_s=5).request(method, path, body)
                    seen[name] = 200
                except AdminError as exc:
                    seen[name] = exc.status
            for name, target in (("token", base / "admin" / TOKEN_FILE), ("listing", base / "admin")):
                try:
                    if target.is_dir():
                        os.listdir(target)
                    else:
                        target.read_text()
                    seen[name] = "read"
                except OSError as exc:
                    seen[name] = type(exc).__name__
            held = []  # and it holds many half-sent requests while the operator works
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            for _ in range(100):
                sock = socket.create_connection((host, int(port)), timeout=5)
                sock.sendall(b"POST /v1/freeze HTTP/1.1\r\n")
                held.append(sock)
            os.write(write_end, json.dumps(seen).encode())
            os.close(write_end)
            os.read(go_r, 1)
            code = 0
        except BaseException as exc:  # say why, in the parent's assertion
            os.write(write_end, json.dumps({"child": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 60)  # the child's calls have 5 s deadlines
        if not ready:
            os.kill(pid, signal.SIGKILL)  # ours, by its pid
        seen = json.loads(os.read(read_end, 65536) or b"{}") if ready else {"child": "no answer in 60 s"}
        assert seen == {
            "attach": 401, "freeze": 401, "detach": 401, "show": 401,
            "token": "PermissionError", "listing": "PermissionError",
        }  # fmt: skip
        operator = AdminClient(server.url, server.token, timeout_s=5)
        assert operator.show()["frozen"] is False  # served while the other user holds connections
    finally:
        os.write(go_w, b"x")
        _, status = os.waitpid(pid, 0)
        for fd in (read_end, go_r, go_w):
            os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [t.name for t in store.tiers] == tiers and not store.frozen  # nothing attached or detached
    assert server.context.operations.all() == []


def test_a_peer_over_its_limit_is_told_so_and_served_again_once_under(tmp_path, serve):
    limits = Limits(max_per_peer=2, body_timeout_s=30.0)
    server = serve(tmp_path, tmp_path / "disc", token_file=_token_file(tmp_path), limits=limits)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    head = (
        f"POST /v1/freeze HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 20\r\n\r\n{{".encode()
    )
    slow = []
    try:
        for _ in range(2):  # authorised, their bodies under way: not evictable
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(head)
            slow.append(sock)
        time.sleep(0.3)
        status, body = raw(server.url, b"GET /v1/tiers HTTP/1.1\r\n\r\n")
        assert status == 503 and b"too many connections" in body
    finally:
        for sock in slow:
            sock.close()
    time.sleep(0.3)
    assert AdminClient(server.url, TOKEN).show()["frozen"] is False
