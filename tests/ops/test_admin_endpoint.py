"""The admin endpoint as an operator meets it: a bearer token (from a file or the environment,
never logged) on every request, refused off loopback without one, clear errors (400/401/404/409),
and the ``hicache-mooncake admin`` command reaching every rank of the host through the discovery
files, on real sockets."""

from __future__ import annotations

import json
import logging

import pytest
from ops_helpers import TOKEN, small_config

from hicache_mooncake.admin.client import AdminClient, AdminError
from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.cli import main
from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError

MiB = 1 << 20


def test_every_request_needs_the_token(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    client = admin_for(stores(config), config)
    assert client.show()["tiers"][0]["name"] == "dram"
    for token in (None, "wrong"):
        with pytest.raises(AdminError) as err:
            AdminClient(client.url, token).show()
        assert err.value.status == 401
    with pytest.raises(AdminError) as err:
        AdminClient(client.url, token="wrong").freeze(True)
    assert err.value.status == 401 and client.show()["frozen"] is False


def test_off_loopback_without_a_token_the_endpoint_does_not_start(tmp_path, stores):
    config = small_config(tmp_path)
    store = stores(config)
    cfg = AdminConfig(port=0, host="0.0.0.0", token_env="HICACHE_TEST_NO_SUCH_VAR")
    with pytest.raises(ConfigError, match="admin.host '0.0.0.0' is not loopback"):
        AdminServer(cfg, AdminContext(store)).start()
    with pytest.raises(ConfigError, match="admin.token_file: cannot read"):
        AdminServer(AdminConfig(port=0, token_file=str(tmp_path / "missing")), AdminContext(store)).start()


def test_the_token_comes_from_the_environment_and_is_never_logged(tmp_path, stores, monkeypatch, caplog):
    monkeypatch.setenv("HICACHE_MOONCAKE_ADMIN_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)
    config = small_config(tmp_path)
    server = AdminServer(AdminConfig(port=0, discovery_dir=str(tmp_path / "d")), AdminContext(stores(config)))
    server.start()
    try:
        client = AdminClient(server.url, TOKEN)
        client.show()
        with pytest.raises(AdminError):
            AdminClient(server.url, "bad").show()
        assert "token required" in caplog.text
        assert TOKEN not in caplog.text
    finally:
        server.close()


def test_bad_requests_are_answered_with_what_is_wrong(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    client = admin_for(store, config)
    cases = [
        ("POST", "/v1/resize", {"tier": "dram"}, 400, "'capacity' is required"),
        ("POST", "/v1/resize", {"tier": "dram", "capacity": "lots"}, 400, "'capacity'"),
        ("POST", "/v1/detach", {"tier": "ssd", "mode": "gently"}, 400, "drain, drop"),
        ("POST", "/v1/clear", {"tenant": "a b"}, 400, "tenant 'a b'"),
        ("POST", "/v1/freeze", {"frozen": "yes"}, 400, "true or false"),
        ("GET", "/v1/nothing", None, 404, "no route"),
        ("GET", "/v1/operations/op-999", None, 404, "no operation"),
    ]
    for method, path, body, status, text in cases:
        with pytest.raises(AdminError) as err:
            client.request(method, path, body)
        assert err.value.status == status and text in str(err.value), (path, err.value)
    op = client.wait(client.detach("nvme", "drain"), 30)
    assert op["state"] == "failed" and "no tier named 'nvme'" in op["error"]


def test_one_operation_at_a_time(tmp_path, stores, admin_for):
    config = small_config(tmp_path)
    store = stores(config)
    client = admin_for(store, config)
    with store.state.changes:  # another change holds the store: the first operation waits for it
        first = client.resize("dram", "3MiB")
        with pytest.raises(AdminError) as err:
            client.resize("ssd", "8MiB")
        assert err.value.status == 409 and first["id"] in str(err.value)
    assert client.wait(first, 30)["state"] == "done"
    ops = client.operations()["operations"]
    assert [op["kind"] for op in ops] == ["resize"]


def _two_ranks(tmp_path, stores):  # type: ignore[no-untyped-def]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    servers = []
    for rank in range(2):
        config = small_config(tmp_path / f"r{rank}")
        cfg = AdminConfig(port=0, token_file=str(token_file), discovery_dir=str(tmp_path / "disc"))
        server = AdminServer(
            cfg, AdminContext(stores(config), labels={"model": "m", "rank": str(rank)}), rank
        )
        server.start()
        servers.append(server)
    return servers, token_file


def test_the_cli_reaches_every_rank_of_the_host(tmp_path, stores, capsys):
    servers, token_file = _two_ranks(tmp_path, stores)
    base = ["admin", "--discovery-dir", str(tmp_path / "disc"), "--token-file", str(token_file)]
    try:
        assert main([*base, "show"]) == 0
        out = capsys.readouterr().out
        assert "rank 0 (" in out and "rank 1 (" in out and "4.0MiB" in out
        assert main([*base, "resize", "dram", "2MiB"]) == 0
        out = capsys.readouterr().out
        assert out.count("resize complete") == 2
        assert all(s.context.store.dram.capacity_bytes == 2 * MiB for s in servers)
        assert main([*base, "--json", "freeze"]) == 0
        answers = json.loads(capsys.readouterr().out)
        assert len(answers) == 2 and all(a["frozen"] for a in answers.values())
        assert main([*base, "detach", "nvme"]) == 1  # refused on every rank: findings
        assert "no tier named 'nvme'" in capsys.readouterr().out
    finally:
        for server in servers:
            server.close()
    assert main([*base, "show"]) == 2  # nobody registered any more
    assert "no admin endpoint registered" in capsys.readouterr().err


def test_the_cli_says_when_the_token_is_wrong(tmp_path, stores, capsys):
    servers, _token_file = _two_ranks(tmp_path, stores)
    wrong = tmp_path / "wrong"
    wrong.write_text("nope")
    try:
        code = main(["admin", "--url", servers[0].url, "--token-file", str(wrong), "show"])
        assert code == 2 and "wrong bearer token" in capsys.readouterr().err
    finally:
        for server in servers:
            server.close()


def test_attach_from_the_cli_with_path_and_capacity(tmp_path, stores, admin_for, capsys):
    config = small_config(tmp_path, ssd=False)
    store = stores(config)
    client = admin_for(store, config)
    token_file = tmp_path / "admin.token"
    target = tmp_path / "new-ssd"
    code = main(
        ["admin", "--url", client.url, "--token-file", str(token_file), "attach", "ssd",
         "--path", str(target), "--capacity", "8MiB", "--set", "tiers.ssd.region_size=1MiB"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr()
    assert store.ssd is not None and store.ssd.engine.capacity_bytes == 8 * MiB
    assert (target / "rank0").is_dir()
