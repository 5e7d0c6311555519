"""The demo's account of pages it did not find, from the tiers' own counters.

Every page the demo wrote and did not find again went somewhere a counter records: refused at set,
dropped by the placement policy (DRAM + SSD hold a bounded number of bytes together), evicted
from the SSD by region reclaim, lost on its way from DRAM to the SSD (not admitted, or the write
refused: free-space floor, no space, I/O error), not admitted by the policy, or gone between the
existence check and the read. ``explain_misses`` lists the non-zero ones and says how many misses they
account for, so a gap between the counters and the misses is visible instead of silent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_mooncake.sizes import format_size


def present_runs(present: Sequence[bool]) -> list[tuple[int, int]]:
    """``[lo, hi)`` index ranges of consecutive True values."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, ok in enumerate([*present, False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            runs.append((start, i))
            start = None
    return runs


def leading_run(results: Sequence[bool]) -> int:
    """How many results are True before the first False (what SGLang uses of a get)."""
    n = 0
    for ok in results:
        if not ok:
            break
        n += 1
    return n


def explain_misses(
    before_read: dict[str, Any],
    after_read: dict[str, Any],
    pages: int,
    stored: int,
    found: int,
    vanished: int,
) -> list[str]:
    """Lines for the demo's output: why ``pages - found`` pages were not found.

    ``before_read`` / ``after_read`` are ``tier_stats()`` of the end of the write phase and of the
    end. The causes are counted at the end of the write phase (which pages a read can find is
    decided then); the read phase itself moves pages (an SSD hit is promoted into DRAM, which
    pushes others down), and what it evicted is reported on its own line."""
    missing = pages - found
    if missing <= 0:
        return [f"all {pages} pages found"]
    causes = [(pages - stored, _refused_at_set(before_read)), *_causes(before_read)]
    causes.append((vanished, "present, then not read back (a failed read, or evicted meanwhile)"))
    shown = [(n, text) for n, text in causes if n > 0]
    lines = [f"not found: {missing} of {pages} pages; from the counters:"]
    lines += [f"  {n:6d} {text}" for n, text in shown]
    left = missing - sum(n for n, _ in shown)
    during_read = sum(n for n, _ in _causes(after_read)) - sum(n for n, _ in _causes(before_read))
    if left > 0 and during_read > 0:
        n = min(left, during_read)
        lines.append(f"  {n:6d} evicted during the read phase (reads promote SSD hits, moving other pages)")
        left -= n
    if left > 0:
        lines.append(f"  {left:6d} not accounted for by these counters")
    elif left < 0:
        lines.append(f"  (these counters add up to {missing - left}: some pages were counted twice)")
    return lines


def _refused_at_set(stats: dict[str, Any]) -> str:
    tiers = stats.get("tiers", {})
    placement, dram = tiers.get("placement") or {}, tiers.get("dram") or {}
    if placement.get("local_put_failed") or dram.get("rejected_no_space"):
        return "refused at set: no free DRAM slot in time (moving older pages to the SSD had not made room)"
    return "refused at set"


def _causes(stats: dict[str, Any]) -> list[tuple[int, str]]:
    """(pages, why) for each counter of a ``tier_stats()`` snapshot that removes pages."""
    tiers = stats.get("tiers", {})
    placement = tiers.get("placement") or {}
    ssd = tiers.get("ssd") or {}
    mover = ssd.get("background") or {}
    refused = ", ".join(f"{why}: {n}" for why, n in (ssd.get("rejected") or {}).items() if n)
    not_written = [
        (mover.get("demoted_refused", 0), "not admitted: tiers.ssd.admit_min_hits / write_budget_mbps"),
        (mover.get("demoted_failed", 0), f"write refused{f' ({refused})' if refused else ''}"),
    ]
    detail = "; ".join(f"{text}: {n}" for n, text in not_written if n)
    capacity = placement.get("capacity")
    return [
        (
            placement.get("dropped", 0),
            "dropped by the placement policy"
            + (
                f" ({placement.get('policy')} keeps at most {format_size(capacity)} in DRAM + SSD)"
                if capacity
                else ""
            ),
        ),
        (placement.get("forgotten", 0), "evicted from the SSD by region reclaim while writing"),
        (
            placement.get("dropped_on_demotion", 0),
            "lost on their way from DRAM to the SSD" + (f" ({detail})" if detail else ""),
        ),
        (placement.get("not_admitted", 0), "not admitted by the placement policy"),
    ]


def ssd_use_lines(tiers: dict[str, Any], pages: int, page_bytes: int) -> list[str]:
    """Whether the write phase reached the SSD tier (``tiers``: ``tier_stats()["tiers"]`` at its
    end). Pages go to the SSD only once DRAM fills to its high watermark (the placement's
    ``dram_capacity``), so a small ``--pages`` never touches it: said so, with the page count that
    would."""
    ssd = tiers.get("ssd")
    if not ssd or "tier" not in ssd:
        return []
    demoted = (ssd.get("background") or {}).get("demoted", 0)
    if demoted or ssd.get("puts", 0):
        return [
            f"SSD tier: {demoted} pages moved there from DRAM ({format_size(ssd.get('bytes_written', 0))} written)"
        ]
    dram_room = (tiers.get("placement") or {}).get("dram_capacity") or (tiers.get("dram") or {}).get(
        "capacity_bytes", 0
    )
    reach = f"; about {dram_room // page_bytes + 1} pages or more reach it" if dram_room else ""
    return [
        f"SSD tier: not used: all {pages} pages ({format_size(pages * page_bytes)}) fit in DRAM "
        f"below its high watermark ({format_size(dram_room)}){reach}"
    ]


def tier_rows(after: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """One row per local tier: what it holds, what the read phase served from it, and what left it
    over the whole demo, with the same counters ``explain_misses`` reads: DRAM pages moved to the
    SSD (demotions), SSD pages evicted by region reclaim (``placement.forgotten``), and pages the
    placement policy dropped from each tier."""
    placement = after.get("placement") or {}
    rows = ["tiers (hits: pages the read phase served from each tier; the rest counts the whole demo):"]
    for name, st in after.items():
        if "tier" not in st:
            continue
        served = st.get("hits", 0) - before.get(name, {}).get("hits", 0)
        left = []
        if name == "dram" and "ssd" in after:
            left.append(f"moved_to_ssd={placement.get('demotions', 0)}")
        if name == "ssd":
            left.append(f"evicted_by_region_reclaim={placement.get('forgotten', 0)}")
        left.append(f"dropped_by_policy={placement.get(f'dropped_{name}', 0)}")
        extra = ""
        if name == "ssd":
            extra = (
                f" io={st.get('io_mode')} demoted={st.get('background', {}).get('demoted', 0)}"
                f" written={format_size(st.get('bytes_written', 0))}"
            )
        rows.append(
            f"  {name:6s} entries={st.get('entries', 0):6d} used={format_size(st.get('used_bytes', 0))}"
            f" of {format_size(st.get('capacity_bytes', 0))} hits={served} {' '.join(left)}{extra}"
        )
    return rows
