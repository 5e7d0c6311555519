"""Observability out of the box (issue 46, item 6): every shipped preset serves the metrics and the
admin endpoint on loopback at any free port, so after the README's launch line
``hicache-mooncake stats`` and ``hicache-mooncake admin show`` find every rank with no flag (the
discovery files and the generated admin token live in the user's private runtime dir)."""

from __future__ import annotations

import stat

import pytest
from ops_helpers import small_config

from hicache_mooncake.admin.auth import TOKEN_FILE, is_loopback
from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.cli import main
from hicache_mooncake.config import load_config_file
from hicache_mooncake.config.admin import TOKEN_ENV
from hicache_mooncake.metrics.rank import BackendMetrics, RankLabels
from hicache_mooncake.presets import preset_names, preset_path


@pytest.mark.parametrize("preset", preset_names())
def test_each_preset_turns_metrics_and_admin_on_at_a_free_loopback_port(preset):
    config = load_config_file(preset_path(preset)).config
    for section in (config.metrics, config.admin):
        assert section.port == 0 and is_loopback(section.host)
        assert section.discovery_dir == ""  # the user's private runtime dir
    assert config.admin.token_file == ""  # the token is generated: nothing to share by hand


def test_stats_and_admin_show_work_with_no_flag_after_the_default_preset(
    tmp_path, stores, monkeypatch, capsys
):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # this test's own default dirs
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    config = load_config_file(preset_path("default")).config
    store = stores(small_config(tmp_path))
    metrics = BackendMetrics(store.stats, RankLabels("org/m", 0))
    admin = AdminServer(config.admin, AdminContext(store, labels={"model": "org/m", "rank": "0"}))
    try:
        assert metrics.serve(config.metrics, lambda: (True, {})) > 0
        assert admin.start() > 0
        assert main(["stats"]) == 0
        assert "model org/m: 1 rank(s)" in capsys.readouterr().out
        assert main(["admin", "show"]) == 0
        assert "rank 0 (" in capsys.readouterr().out
        token = runtime / "hicache-mooncake" / "admin" / TOKEN_FILE
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        for private in (token.parent, token.parent.parent, runtime / "hicache-mooncake" / "metrics"):
            assert stat.S_IMODE(private.stat().st_mode) == 0o700, private
    finally:
        admin.close()
        metrics.close()
