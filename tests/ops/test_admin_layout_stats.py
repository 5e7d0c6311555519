"""``hicache-mooncake stats`` reads the admin side too, with no flag after the default preset: each
rank's layout report (``GET /v1/layout``, through the generated token), and the ranks that serve
metrics but no admin endpoint are named as unavailable (in ``--json`` and in the table)."""

from __future__ import annotations

import json

from ops_helpers import small_config

from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.cli import main
from hicache_mooncake.config import load_config_file
from hicache_mooncake.config.admin import TOKEN_ENV
from hicache_mooncake.metrics.rank import BackendMetrics, RankLabels
from hicache_mooncake.presets import preset_path


def test_stats_shows_each_ranks_layout_and_the_ranks_without_an_admin_endpoint(
    tmp_path, stores, monkeypatch, capsys
):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    config = load_config_file(preset_path("default")).config
    store = stores(small_config(tmp_path))
    ranks = [BackendMetrics(store.stats, RankLabels("org/m", r)) for r in range(2)]
    admin = AdminServer(config.admin, AdminContext(store, labels={"model": "org/m", "rank": "0"}))
    try:
        for metrics in ranks:
            assert metrics.serve(config.metrics, lambda: (True, {})) > 0
        admin.start()  # rank 1 has none (its endpoint could not start)
        assert main(["stats", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)["admin"]
        (served,) = report["endpoints"]
        assert (served["rank"], served["url"]) == ("0", admin.url)
        layout = served["layout"]
        assert layout["backend"] == "hicache-mooncake" and layout["enabled"] is False
        assert [t["name"] for t in layout["tiers"]] == ["dram", "ssd"]
        assert [(u["model"], u["rank"]) for u in report["unavailable"]] == [("org/m", "1")]
        assert main(["stats"]) == 0
        assert "rank 1: admin endpoint unavailable" in capsys.readouterr().out
    finally:
        admin.close()
        for metrics in ranks:
            metrics.close()
