"""Writes ``hicache-mooncake.json`` (a Grafana dashboard) beside this file, from the panels below.

``python deploy/grafana/build_dashboard.py`` after changing a panel; ``tests/unit/test_dashboard.py``
checks that the committed JSON is this script's output and that every series it queries is one our
exporters serve. Import the JSON in Grafana (Dashboards > New > Import) and pick the Prometheus data
source that scrapes every rank's ``metrics.port + rank``, the memory nodes' ``node.metrics.port`` and
the host cache service's ``host_cache.metrics_port`` (by default a free port: its URL is in the
metrics discovery directory and in ``hicache-mooncake host-cache status``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "hicache-mooncake.json"
SEL = 'model=~"$model", rank=~"$rank"'
R = "[$__rate_interval]"
HC = 'node=~"host-cache-.*"'  # the host cache service's own series (its node id is host-cache-<name>)


def panel(
    title: str, targets: list[tuple[str, str]], unit: str = "short", kind: str = "timeseries"
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}
        },
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def quantiles(metric: str, op: str, by: str) -> list[tuple[str, str]]:
    return [
        (
            f'histogram_quantile({q}, sum by (le, {by}) (rate(hicache_mooncake:{metric}_bucket{{{SEL}, op="{op}"}}{R})))',
            f"p{round(q * 100)} {{{{{by}}}}}",
        )
        for q in (0.5, 0.99)
    ]


def rows() -> list[tuple[str, list[dict[str, Any]]]]:
    hits = f"sum by (tier) (rate(hicache_mooncake:tier_hits_total{{{SEL}}}{R}))"
    misses = f"sum by (tier) (rate(hicache_mooncake:tier_misses_total{{{SEL}}}{R}))"
    return [
        (
            "Traffic",
            [
                panel("Hit rate per tier (keys asked of the tier)", [(f"{hits} / ({hits} + {misses})", "{{tier}}")],
                      "percentunit"),
                panel("Pages per second (SGLang's calls)",
                      [(f"sum by (op, result) (rate(hicache_mooncake:pages_total{{{SEL}}}{R}))", "{{op}} {{result}}")],
                      "ops"),
                panel("Bytes per second per tier", [
                    (f"sum by (tier) (rate(hicache_mooncake:tier_read_bytes_total{{{SEL}}}{R}))", "read {{tier}}"),
                    (f"sum by (tier) (rate(hicache_mooncake:tier_written_bytes_total{{{SEL}}}{R}))", "written {{tier}}"),
                ], "Bps"),
                panel("Fill per tier", [(
                    f"sum by (tier) (hicache_mooncake:tier_used_bytes{{{SEL}}}) / "
                    f"sum by (tier) (hicache_mooncake:tier_capacity_bytes{{{SEL}}})", "{{tier}}")], "percentunit"),
            ],
        ),
        (
            "Latency",
            [
                panel("get latency per tier", quantiles("tier_op_seconds", "get", "tier"), "s"),
                panel("set latency per tier", quantiles("tier_op_seconds", "set", "tier"), "s"),
                panel("exists latency per tier", quantiles("tier_op_seconds", "exists", "tier"), "s"),
                panel("Backend call latency (get / set, all tiers)",
                      quantiles("call_seconds", "get", "op") + quantiles("call_seconds", "set", "op"), "s"),
            ],
        ),
        (
            "Movement",
            [
                panel("Evictions per second per tier",
                      [(f"sum by (tier) (rate(hicache_mooncake:tier_evictions_total{{{SEL}}}{R}))", "{{tier}}")],
                      "ops"),
                panel("Promotions / demotions per second", [
                    (f"sum(rate(hicache_mooncake:promotions_total{{{SEL}}}{R}))", "promoted into DRAM"),
                    (f"sum(rate(hicache_mooncake:demotions_total{{{SEL}}}{R}))", "demoted out of DRAM"),
                ], "ops"),
                panel("Mover queue depth per rank",
                      [(f"hicache_mooncake:mover_queue_depth{{{SEL}}}", "rank {{rank}}")]),
                panel("Mover pages per second", [(
                    f"sum by (kind, result) (rate(hicache_mooncake:mover_pages_total{{{SEL}}}{R}))",
                    "{{kind}} {{result}}")], "ops"),
                panel("Refusals per second by tier and cause", [(
                    f"sum by (tier, cause) (rate(hicache_mooncake:tier_refusals_total{{{SEL}}}{R}))",
                    "{{tier}} {{cause}}"),
                    (f"sum(rate(hicache_mooncake:placement_refused_total{{{SEL}}}{R}))", "policy (not admitted)"),
                ], "ops"),
            ],
        ),
        (
            "Health",
            [
                panel("Checksum errors and failed calls (increase)", [
                    (f"sum by (tier) (increase(hicache_mooncake:tier_checksum_errors_total{{{SEL}}}{R}))",
                     "checksum {{tier}}"),
                    (f"sum by (op) (increase(hicache_mooncake:call_failures_total{{{SEL}}}{R}))", "failed {{op}}"),
                ]),
                panel("Degraded / detached tiers", [
                    (f"max by (tier) (hicache_mooncake:tier_degraded{{{SEL}}})", "degraded {{tier}}"),
                    (f"max by (tier) (hicache_mooncake:tier_detached{{{SEL}}})", "detached {{tier}}"),
                ]),
                panel("Recovery at attach", [
                    (f"max by (tier) (hicache_mooncake:tier_recovery_seconds{{{SEL}}})", "seconds {{tier}}"),
                    (f"sum by (tier) (hicache_mooncake:tier_recovered_entries{{{SEL}}})", "entries {{tier}}"),
                ]),
                panel("Ranks exporting", [(f"count by (model) (hicache_mooncake:backend_info{{{SEL}}})", "{{model}}")],
                      kind="stat"),
            ],
        ),
        (
            "Tenants",
            [
                panel("Bytes per tenant and tier (dashed: its share)", [
                    (f"sum by (tenant, tier) (hicache_mooncake:tenant_used_bytes{{{SEL}}})", "{{tenant}} {{tier}}"),
                    (f"sum by (tenant, tier) (hicache_mooncake:tenant_share_bytes{{{SEL}}})",
                     "share {{tenant}} {{tier}}"),
                ], "bytes"),
                panel("Get hit rate per tenant", [(
                    f'sum by (tenant) (rate(hicache_mooncake:tenant_pages_total{{{SEL}, op="get", result="hit"}}{R}))'
                    f' / sum by (tenant) (rate(hicache_mooncake:tenant_pages_total{{{SEL}, op="get"}}{R}))',
                    "{{tenant}}")], "percentunit"),
                panel("Pages moved out for being over the share (per second)", [(
                    f"sum by (tenant, action) (rate(hicache_mooncake:tenant_over_share_total{{{SEL}}}{R}))",
                    "{{tenant}} {{action}}")], "ops"),
            ],
        ),
        (
            "Memory nodes",
            [
                panel("Node requests per second",
                      [("sum by (node, op) (rate(hicache_mooncake:node_requests_total" + R + "))", "{{node}} {{op}}")],
                      "ops"),
                panel("Node fill", [(
                    "hicache_mooncake:node_used_bytes / hicache_mooncake:node_capacity_bytes", "{{node}}")],
                    "percentunit"),
                panel("Node connections", [("hicache_mooncake:node_connections", "{{node}}")]),
                panel("Node evictions and errors per second", [
                    ("sum by (node) (rate(hicache_mooncake:node_evictions_total" + R + "))", "evicted {{node}}"),
                    ("sum by (node, cause) (rate(hicache_mooncake:node_errors_total" + R + "))", "{{node}} {{cause}}"),
                ], "ops"),
            ],
        ),
        (
            "Host cache (the service; its clients are the ranks above with a host_cache tier)",
            [
                panel("Host cache fill per tier", [(
                    f"sum by (node, tier) (hicache_mooncake:tier_used_bytes{{{HC}}}) / "
                    f"sum by (node, tier) (hicache_mooncake:tier_capacity_bytes{{{HC}}})", "{{node}} {{tier}}")],
                    "percentunit"),
                panel("Host cache hit rate per tier", [(
                    f"sum by (node, tier) (rate(hicache_mooncake:tier_hits_total{{{HC}}}{R})) / "
                    f"(sum by (node, tier) (rate(hicache_mooncake:tier_hits_total{{{HC}}}{R})) + "
                    f"sum by (node, tier) (rate(hicache_mooncake:tier_misses_total{{{HC}}}{R})))", "{{node}} {{tier}}")],
                    "percentunit"),
                panel("Host cache requests per second per client", [(
                    f"sum by (client) (rate(hicache_mooncake_host_cache_client_requests_total{R}))", "{{client}}")],
                    "ops"),
                panel("Host cache lookup hit rate per client", [(
                    f"sum by (client) (rate(hicache_mooncake_host_cache_client_lookup_hits_total{R})) / "
                    f"sum by (client) (rate(hicache_mooncake_host_cache_client_lookups_total{R}))", "{{client}}")],
                    "percentunit"),
                panel("Host cache clients and connections", [
                    ("count(hicache_mooncake_host_cache_client_connections > 0)", "clients attached"),
                    ("sum(hicache_mooncake_host_cache_client_connections)", "connections"),
                ]),
                panel("Host cache degraded tiers and draining", [
                    (f"max by (node, tier) (hicache_mooncake:tier_degraded{{{HC}}})", "degraded {{node}} {{tier}}"),
                    (f"max by (node) (hicache_mooncake:node_draining{{{HC}}})", "draining {{node}}"),
                ]),
            ],
        ),
    ]  # fmt: skip


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for i, (title, members) in enumerate(rows()):
        panels.append({"type": "row", "title": title, "collapsed": False, "id": 100 + i,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})  # fmt: skip
        y += 1
        for j, p in enumerate(members):
            p["id"] = 100 * (i + 1) + j + 1
            p["gridPos"] = {"h": 8, "w": 12, "x": 12 * (j % 2), "y": y + 8 * (j // 2)}
            panels.append(p)
        y += 8 * ((len(members) + 1) // 2)

    def var(name: str, query: str) -> dict[str, Any]:
        return {
            "name": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "multi": True, "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
        }  # fmt: skip

    return {
        "title": "hicache-mooncake",
        "uid": "hicache-mooncake",
        "description": "Tiered KV cache for SGLang HiCache: per-tier traffic, latency, movement and health, "
        "per model and rank (metrics.port + rank), the memory nodes, and the host cache service with its clients.",
        "tags": ["sglang", "hicache", "kv-cache"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {}},
                var("model", "label_values(hicache_mooncake:backend_info, model)"),
                var("rank", 'label_values(hicache_mooncake:backend_info{model=~"$model"}, rank)'),
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
