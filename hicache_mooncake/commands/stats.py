"""``hicache-mooncake stats``: what each tier of a running backend holds, read from its Prometheus
endpoint (``metrics.port`` in the YAML), or offline from an SSD tier directory."""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hicache_mooncake.commands import UsageError
from hicache_mooncake.sizes import format_size


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "stats", help="per-tier entries and bytes of a running backend (Prometheus endpoint)"
    )
    parser.add_argument("--url", default="http://127.0.0.1:9400/metrics", help="the backend's metrics URL")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the endpoint")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        raise UsageError(f"cannot read {args.url}: {exc}") from None
    tiers: dict[str, dict[str, float]] = defaultdict(dict)
    pages: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name.startswith("hicache_mooncake_tier_"):
                tiers[sample.labels["tier"]][family.name.removeprefix("hicache_mooncake_tier_")] = (
                    sample.value
                )
            elif sample.name == "hicache_mooncake_pages_total":
                pages[(sample.labels["op"], sample.labels["result"])] = sample.value
    if not tiers:
        raise UsageError(f"{args.url} has no hicache_mooncake metrics (is it the backend's metrics.port?)")
    print(f"{'tier':8s} {'entries':>10s} {'used':>10s} {'capacity':>10s}")
    for name, values in tiers.items():
        print(
            f"{name:8s} {int(values.get('entries', 0)):>10d} {format_size(values.get('used_bytes', 0)):>10s}"
            f" {format_size(values.get('capacity_bytes', 0)):>10s}"
        )
    for (op, result), value in sorted(pages.items()):
        print(f"pages {op:4s} {result:7s} {int(value)}")
    return 0
