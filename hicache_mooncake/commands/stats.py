"""``hicache-mooncake stats``: what every rank (and memory node) of this host holds and did, per tier.

Finds the serving processes in the metrics discovery directory (each rank and node with a metrics
port writes its URL there: ``metrics.discovery_dir``; ``--config FILE`` reads it from a YAML,
``--dir`` names it), or reads the ``--url`` given (repeatable). Prints one row per rank and tier
plus the sum over ranks, then the memory nodes, then each host cache service (its tiers, and every
client attached, named by rank when the client registered its own metrics); ``--json`` prints the
same figures as JSON.
Latencies are estimated from the ``tier_op_seconds`` histogram buckets (p50 / p99).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.config import load_config_file
from hicache_mooncake.metrics import discovery as metrics_discovery
from hicache_mooncake.metrics.scrape import EndpointReport, ScrapeError, fetch, parse
from hicache_mooncake.sizes import format_size

_SUMMED = (
    "entries",
    "used_bytes",
    "capacity_bytes",
    "hits",
    "misses",
    "read_bytes",
    "written_bytes",
    "evictions",
)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "stats",
        help="per-tier figures of every rank (and memory node) of this host, from their metrics endpoints",
        description=__doc__,
    )
    parser.add_argument(
        "--url",
        action="append",
        default=None,
        help="a metrics URL to read (repeatable); default: discover them",
    )
    parser.add_argument("--config", default=None, help="YAML whose metrics.discovery_dir to look in")
    parser.add_argument("--dir", default=None, help="discovery directory to look in")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for each endpoint")
    parser.set_defaults(func=run)


def _urls(args: argparse.Namespace) -> list[str]:
    return [e.url for e in _endpoints(args)]


def _endpoints(args: argparse.Namespace) -> list[metrics_discovery.Endpoint]:
    if args.url:
        return [metrics_discovery.Endpoint("", url, 0) for url in args.url]
    configured = args.dir or (
        load_config_file(args.config).config.metrics.discovery_dir if args.config else ""
    )
    directory = metrics_discovery.resolve_dir(configured)
    found = metrics_discovery.endpoints(directory)
    if not found:
        raise UsageError(
            f"no rank or node of this host serves metrics (nothing registered in {directory}); set metrics.port "
            "in the YAML, or pass --url"
        )
    return found


def run(args: argparse.Namespace) -> int:
    from hicache_mooncake.host_cache.metrics import is_host_cache, parse_clients

    reports: list[EndpointReport] = []
    problems: list[str] = []
    pids: dict[str, int] = {}  # url -> the pid it registered (discovery), to name host cache clients
    caches: list[tuple[EndpointReport, dict[str, dict[str, int]]]] = []
    for endpoint in _endpoints(args):
        try:
            text = fetch(endpoint.url, args.timeout)
            report = parse(endpoint.url, text)
        except ScrapeError as exc:
            problems.append(str(exc))
            continue
        pids[endpoint.url] = endpoint.pid
        if is_host_cache(text):  # the host cache service: its tiers and its clients, apart
            caches.append((report, parse_clients(text)))
        else:
            reports.append(report)
    if not reports and not caches:
        raise UsageError("; ".join(problems))
    for problem in problems:
        print(f"hicache-mooncake stats: {problem}", file=sys.stderr)
    ranks = sorted(
        (r for r in reports if "rank" in r.labels), key=lambda r: (r.labels.get("model", ""), _int(r))
    )
    nodes = [r for r in reports if "rank" not in r.labels]
    if args.json:
        print(
            json.dumps(
                {
                    "ranks": [r.as_dict() for r in ranks],
                    "total": _total(ranks),
                    "nodes": [n.as_dict() for n in nodes],
                    "host_caches": [{**c.as_dict(), "clients": clients} for c, clients in caches],
                    "unreachable": problems,
                    "admin": _admin(args, ranks),
                },
                indent=2,
            )
        )
        return 0
    _print_ranks(ranks)
    for missing in _admin(args, ranks)["unavailable"] if ranks else []:
        print(f"rank {missing['rank']}: admin endpoint unavailable ({missing['why']})")
    _print_nodes(nodes)
    _print_host_caches(caches, {pids.get(r.url, 0): r for r in ranks})
    return 0


def _admin(args: argparse.Namespace, ranks: list[EndpointReport]) -> dict[str, Any]:
    """Each rank's layout from its admin endpoint, and the ranks without one (``admin.stats_view``)."""
    from hicache_mooncake.admin.stats_view import admin_config, admin_section

    return admin_section([r.labels for r in ranks], admin_config(args.config), args.timeout)


def _int(report: EndpointReport) -> int:
    try:
        return int(report.labels.get("rank", "0"))
    except ValueError:
        return 0


def _total(ranks: list[EndpointReport]) -> dict[str, dict[str, float]]:
    total: dict[str, dict[str, float]] = {}
    for report in ranks:
        for tier, values in report.tiers.items():
            into = total.setdefault(tier, {})
            for key in _SUMMED:
                if isinstance(values.get(key), int | float):
                    into[key] = into.get(key, 0) + values[key]
    return total


_HEADER = (
    f"{'rank':>4s} {'tier':8s} {'entries':>9s} {'used':>9s} {'capacity':>9s} {'hit%':>6s} {'hits':>8s} "
    f"{'misses':>8s} {'read':>9s} {'written':>9s} {'evicted':>8s} {'refused':>8s} {'get p50/p99':>16s}"
)


def _row(rank: str, tier: str, v: dict[str, Any]) -> str:
    hits, misses = v.get("hits", 0), v.get("misses", 0)
    hit_rate = f"{100 * hits / (hits + misses):.1f}" if hits + misses else "-"
    # causes where the tier counts them, otherwise the keys its sets did not store
    refused = sum(v["refusals"].values()) if "refusals" in v else v.get("write_failures", 0)
    latency = v.get("latency_s", {}).get("get", {})
    lat = "/".join(_ms(latency.get(p)) for p in ("p50", "p99")) if latency else "-"
    flags = "".join(f" {k}" for k in ("degraded", "detached") if v.get(k))
    return (
        f"{rank:>4s} {tier:8s} {int(v.get('entries', 0)):>9d} {format_size(v.get('used_bytes', 0)):>9s} "
        f"{format_size(v.get('capacity_bytes', 0)):>9s} {hit_rate:>6s} {int(hits):>8d} {int(misses):>8d} "
        f"{format_size(v.get('read_bytes', 0)):>9s} {format_size(v.get('written_bytes', 0)):>9s} "
        f"{int(v.get('evictions', 0)):>8d} {int(refused):>8d} {lat:>16s}{flags}"
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}ms"


def _print_ranks(ranks: list[EndpointReport]) -> None:
    if not ranks:
        return
    for model in dict.fromkeys(r.labels.get("model", "") for r in ranks):
        group = [r for r in ranks if r.labels.get("model", "") == model]
        print(f"model {model}: {len(group)} rank(s)")
        print(_HEADER)
        for report in group:
            for tier, values in report.tiers.items():
                print(_row(report.labels.get("rank", "?"), tier, values))
        if len(group) > 1:
            for tier, values in _total(group).items():
                print(_row("all", tier, values))
        for report in group:
            pages = report.process.get("pages", {})
            moved = " ".join(
                f"{op} {result} {n}"
                for op, results in sorted(pages.items())
                for result, n in sorted(results.items())
            )
            extra = " ".join(
                f"{k} {report.process[k]}"
                for k in ("promotions", "demotions", "placement_refused", "mover_queue_depth")
                if k in report.process
            )
            print(
                f"rank {report.labels.get('rank', '?')}: pages {moved or '-'}"
                + (f"; {extra}" if extra else "")
            )


def _print_nodes(nodes: list[EndpointReport]) -> None:
    for node in nodes:
        p = node.process
        requests = " ".join(f"{op} {n}" for op, n in sorted(p.get("requests", {}).items()))
        print(
            f"node {node.labels.get('node', node.url)}: {int(p.get('entries', 0))} objects, "
            f"{format_size(p.get('used_bytes', 0))} of {format_size(p.get('capacity_bytes', 0))}, "
            f"{int(p.get('connections', 0))} connections; requests {requests or '-'}"
        )
        for tier, values in node.tiers.items():
            print(_row("node", tier, values))


def _print_host_caches(
    caches: list[tuple[EndpointReport, dict[str, dict[str, int]]]], ranks_by_pid: dict[int, EndpointReport]
) -> None:
    """Each host cache service: its tiers, then every client attached (named by rank when the
    client process registered its own metrics)."""
    for cache, clients in caches:
        p = cache.process
        print(
            f"host cache {cache.labels.get('node', cache.url)}: {int(p.get('connections', 0))} connections, "
            f"{len(clients)} client(s) attached ({cache.url})"
        )
        print(_HEADER)
        for tier, values in cache.tiers.items():
            print(_row("svc", tier, values))
        for client, c in sorted(clients.items()):
            pid = int(client[4:]) if client.startswith("pid:") and client[4:].isdigit() else -1
            rank = ranks_by_pid.get(pid)
            who = (
                f" = model {rank.labels.get('model', '')} rank {rank.labels.get('rank', '?')}" if rank else ""
            )
            print(
                f"client {client}{who}: {c.get('connections', 0)} connections, {c.get('requests', 0)} requests, "
                f"{c.get('lookup_hits', 0)}/{c.get('lookups', 0)} lookups hit, {c.get('committed', 0)} stored, "
                f"{c.get('aborted', 0)} aborted"
            )
