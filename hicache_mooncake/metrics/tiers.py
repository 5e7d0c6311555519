"""Per-tier figures read at scrape time from ``TieredStore.stats()`` (what the tiers, the placement and
the mover already count), turned into Prometheus families with the registry's base labels
(``model``, ``rank``) plus ``tier``.

Families (``hicache_mooncake:`` prefix; counters end in ``_total``):

- ``tier_entries``, ``tier_used_bytes``, ``tier_capacity_bytes``: what each tier holds now;
- ``tier_evictions_total``: pages that left a tier for lack of room: DRAM: demoted to SSD or dropped
  by the policy; SSD: dropped by region reclaim or by the policy;
- ``tier_refusals_total{cause}``: pages a tier refused: ``no_space``, ``too_large`` (DRAM, SSD),
  ``floor`` (the SSD's free-space floor), ``io_error``, ``admission`` (``admit_min_hits``),
  ``budget`` (``write_budget_mbps``);
- ``tier_checksum_errors_total``: SSD reads whose payload failed its checksum (a miss, never data);
- ``tier_recovery_seconds``, ``tier_recovered_entries``, ``tier_recovery_skipped_entries{cause}``:
  the SSD index rebuilt at attach;
- ``tier_degraded``, ``tier_degraded_episodes_total``: 1 while a tier reports itself degraded, and
  how often it became so (only for tiers that report it, e.g. an SSD tier whose disk stalls);
- ``tier_detached``, ``tier_nodes``: the remote pool (metadata service unreachable; live nodes);
- ``tier_info{io_mode}``: how the SSD tier does its I/O (O_DIRECT or buffered);
- ``promotions_total`` (pages copied into DRAM from SSD or the pool), ``promotions_skipped_total``
  (no DRAM room), ``demotions_total`` (pages the policy moved out of DRAM), ``placement_refused_total``
  (pages the policy did not admit), ``set_no_room_total`` (pages a set could not place in time),
  ``set_waits_for_room_total`` (sets that ran queued demotions themselves);
- ``mover_queue_depth``, ``mover_pages_total{kind,result}`` (``demoted``/``copied``/``flushed`` x
  ``written``/``refused``/``failed``), ``mover_lost_total``, ``mover_errors_total``;
- per tenant (``tenant`` label, ``(default)`` for the unnamed one; at most ``tenants.max_tenants``,
  the rest counted as ``(other)``): ``tenant_used_bytes{tier}`` and ``tenant_share_bytes{tier}``
  (its share, only for tenants that have one), ``tenant_pages_total{op,result}`` (``get``/``exists``:
  ``hit``/``miss``; ``set``: ``stored``/``not_stored``/``refused_frozen``) and
  ``tenant_over_share_total{action}`` (its pages ``evicted``/``demoted`` because it was over its share).

A family is emitted only for the tiers that count it, and a counter only once its source exists
(the stats dicts carry a key from its first increment), so no series is always zero. Each scrape
costs one ``stats()`` call (the remote tier asks every node once, within its timeout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "hicache_mooncake:"
REFUSAL_CAUSES = ("no_space", "too_large", "floor", "io_error")
MOVER_KINDS = ("demoted", "copied", "flushed")


class Families:
    """Families of one scrape, created on first use, with the base labels prepended."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self._names = list(base)
        self._values = list(base.values())
        self._families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(self, kind: str, name: str, doc: str, labels: Mapping[str, str], value: float) -> None:
        family = self._families.get(name)
        if family is None:
            labelnames = [*self._names, *labels]
            if kind == "counter":
                family = CounterMetricFamily(PREFIX + name, doc, labels=labelnames)
            else:
                family = GaugeMetricFamily(PREFIX + name, doc, labels=labelnames)
            self._families[name] = family
        family.add_metric([*self._values, *labels.values()], float(value))

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


def stat_value(stats: Mapping[str, Any], key: str) -> float | None:
    """``stats[key]`` as a float when it is a number (not a bool), else None (absent: no sample)."""
    value = stats.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class TierStatsCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any]], base_labels: Mapping[str, str]) -> None:
        self._stats = stats
        self._base = dict(base_labels)

    def collect(self) -> Iterator[Metric]:
        out = Families(self._base)
        stats = self._stats()
        placement = stats.get("placement") if isinstance(stats.get("placement"), dict) else {}
        for name, tier in stats.items():
            if isinstance(tier, dict) and "tier" in tier:
                _tier(out, name, tier, placement or {})
        if placement:
            _placement(out, placement)
        ssd = stats.get("ssd")
        if isinstance(ssd, dict) and isinstance(ssd.get("background"), dict):
            _mover(out, ssd["background"])
        tenants = stats.get("tenants")
        if isinstance(tenants, dict):
            for tenant, figures in tenants.items():
                if isinstance(figures, dict):
                    _tenant(out, tenant or "(default)", figures)
        yield from out


def _tier(out: Families, name: str, tier: Mapping[str, Any], placement: Mapping[str, Any]) -> None:
    t = {"tier": name}
    for key, family, doc in (
        ("entries", "tier_entries", "Objects held per tier"),
        ("used_bytes", "tier_used_bytes", "Bytes held per tier"),
        ("capacity_bytes", "tier_capacity_bytes", "Capacity per tier"),
    ):
        value = stat_value(tier, key)
        if value is not None:
            out.add("gauge", family, doc, t, value)
    evictions = _evictions(name, tier, placement)
    if evictions is not None:
        out.add("counter", "tier_evictions", "Pages that left a tier for lack of room", t, evictions)
    for cause, value in _refusals(tier).items():
        out.add("counter", "tier_refusals", "Pages a tier refused, by cause", {**t, "cause": cause}, value)
    if (checksum := stat_value(tier, "read_checksum_errors")) is not None:
        out.add(
            "counter", "tier_checksum_errors", "Reads whose payload failed its checksum (a miss)", t, checksum
        )
    if (collisions := stat_value(tier, "fingerprint_collisions")) is not None:
        out.add(
            "counter", "tier_fingerprint_collisions",
            "Reads that found another key's entry under the key's fingerprint (a miss)", t, collisions,
        )  # fmt: skip
    if (seconds := stat_value(tier, "recover_seconds")) is not None:
        out.add("gauge", "tier_recovery_seconds", "Time to rebuild the tier's index at attach", t, seconds)
    if (recovered := stat_value(tier, "recovered_entries")) is not None:
        out.add("gauge", "tier_recovered_entries", "Entries found again at attach", t, recovered)
        for cause in ("corrupt", "torn"):
            skipped = stat_value(tier, f"recover_{cause}")
            if skipped is not None:
                out.add(
                    "gauge",
                    "tier_recovery_skipped_entries",
                    "Entries skipped at attach, by cause",
                    {**t, "cause": cause},
                    skipped,
                )
    if isinstance(tier.get("degraded"), bool | int):
        out.add(
            "gauge", "tier_degraded", "1 while the tier reports itself degraded", t, float(tier["degraded"])
        )
    if (episodes := stat_value(tier, "degraded_episodes")) is not None:
        out.add("counter", "tier_degraded_episodes", "Times the tier became degraded", t, episodes)
    if isinstance(tier.get("detached"), bool):
        out.add(
            "gauge",
            "tier_detached",
            "1 while the pool's metadata service is unreachable",
            t,
            tier["detached"],
        )
    if (nodes := stat_value(tier, "nodes")) is not None:
        out.add("gauge", "tier_nodes", "Live memory nodes of the pool", t, nodes)
    if isinstance(tier.get("io_mode"), str):
        out.add("gauge", "tier_info", "How the tier does its I/O", {**t, "io_mode": tier["io_mode"]}, 1)


def _evictions(name: str, tier: Mapping[str, Any], placement: Mapping[str, Any]) -> float | None:
    if not placement or name not in ("dram", "ssd"):
        return None
    dropped = float(placement.get(f"dropped_{name}", 0))
    if name == "dram":
        return float(placement.get("demotions", 0)) + dropped
    return float(tier.get("evicted_entries", 0)) + dropped


def _refusals(tier: Mapping[str, Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    nested = tier.get("rejected")
    for cause in REFUSAL_CAUSES:
        value = nested.get(cause) if isinstance(nested, dict) else tier.get(f"rejected_{cause}")
        if isinstance(value, int | float):
            found[cause] = float(value)
    for cause, key in (("admission", "dropped_cold"), ("budget", "dropped_budget")):
        if (value := stat_value(tier, key)) is not None:
            found[cause] = value
    return found


def _placement(out: Families, placement: Mapping[str, Any]) -> None:
    for key, name, doc in (
        ("promotions", "promotions", "Pages copied into DRAM from SSD or the pool"),
        ("promotions_skipped_full", "promotions_skipped", "Promotions skipped: no DRAM room"),
        ("demotions", "demotions", "Pages the policy moved out of DRAM (to SSD)"),
        ("not_admitted", "placement_refused", "Pages the policy did not admit to this host"),
        ("local_put_failed", "set_no_room", "Pages a set could not place in time"),
        ("waits_for_room", "set_waits_for_room", "Sets that ran queued demotions themselves"),
    ):
        if (value := stat_value(placement, key)) is not None:
            out.add("counter", name, doc, {}, value)


def _mover(out: Families, mover: Mapping[str, Any]) -> None:
    if (queued := stat_value(mover, "queued")) is not None:
        out.add("gauge", "mover_queue_depth", "Pages queued for the DRAM -> SSD mover", {}, queued)
    for kind in MOVER_KINDS:
        for result, key in (("written", kind), ("refused", f"{kind}_refused"), ("failed", f"{kind}_failed")):
            if (value := stat_value(mover, key)) is not None:
                out.add(
                    "counter",
                    "mover_pages",
                    "Pages the mover handled, by kind and result",
                    {"kind": kind, "result": result},
                    value,
                )
    for key, name, doc in (
        ("lost", "mover_lost", "Demoted pages that found no SSD room and left the host"),
        ("errors", "mover_errors", "Mover batches that failed with an exception"),
    ):
        if (value := stat_value(mover, key)) is not None:
            out.add("counter", name, doc, {}, value)


def _tenant(out: Families, tenant: str, t: Mapping[str, Any]) -> None:
    who = {"tenant": tenant}
    for tier in ("dram", "ssd"):
        if (used := stat_value(t, f"{tier}_bytes")) is not None:
            out.add(
                "gauge", "tenant_used_bytes", "Bytes a tenant holds per tier", {**who, "tier": tier}, used
            )
        limit = stat_value(t, f"{tier}_limit_bytes")
        if limit is not None and limit >= 0:
            out.add(
                "gauge",
                "tenant_share_bytes",
                "A tenant's capacity share per tier",
                {**who, "tier": tier},
                limit,
            )
    pages = {
        ("get", "hit"): stat_value(t, "get_hit_pages"),
        ("exists", "hit"): stat_value(t, "exists_hit_pages"),
        ("set", "stored"): stat_value(t, "set_stored_pages"),
        ("set", "refused_frozen"): stat_value(t, "set_refused_frozen"),
    }
    for op, total_key, done_key in (
        ("get", "get_pages", "get_hit_pages"),
        ("exists", "exists_pages", "exists_hit_pages"),
        ("set", "set_pages", None),
    ):
        total = stat_value(t, total_key)
        if total is None:
            continue
        if done_key is not None:
            pages[(op, "miss")] = total - (pages[(op, "hit")] or 0.0)
        else:
            done = (pages[(op, "stored")] or 0.0) + (pages[(op, "refused_frozen")] or 0.0)
            pages[(op, "not_stored")] = total - done
    for (op, result), value in pages.items():
        if value is not None:
            out.add(
                "counter",
                "tenant_pages",
                "Pages of a tenant's calls, by operation and result",
                {**who, "op": op, "result": result},
                value,
            )
    for action, key in (("evicted", "over_share_evicted"), ("demoted", "over_share_demoted")):
        if (value := stat_value(t, key)) is not None:
            out.add(
                "counter",
                "tenant_over_share",
                "Pages of a tenant moved out because it was over its share",
                {**who, "action": action},
                value,
            )
