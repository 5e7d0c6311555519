"""The shipped Grafana dashboard is its generator's output and queries only series our exporters
define (a renamed metric fails here, not on an operator's screen)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "grafana"
SOURCES = [REPO / "hicache_mooncake" / "metrics" / f for f in ("rank.py", "timing.py", "tiers.py", "node.py")]


def generator():
    spec = importlib.util.spec_from_file_location("build_dashboard", GRAFANA / "build_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_dashboard_is_the_generators_output():
    assert (GRAFANA / "hicache-mooncake.json").read_text() == generator().render()


def test_every_queried_series_is_defined_by_an_exporter():
    dashboard = json.loads((GRAFANA / "hicache-mooncake.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [
        v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)
    ]
    source = "\n".join(path.read_text() for path in SOURCES)
    names = {n for e in exprs for n in re.findall(r"hicache_mooncake:([a-z_]+)", e)}
    assert len(names) > 20
    for name in names:
        base = re.sub(r"_(total|bucket|count|sum)$", "", name)
        assert f'"{base}"' in source or f'PREFIX}}{base}"' in source, (
            f"the dashboard queries {name}, no exporter defines it"
        )
