"""Generate ``docs/performance.md`` (and the README's measured comparison rows) from the benchmark
results in ``benchmarks/results/*.json``.

Usage::

    python scripts/gen_performance_doc.py           # rewrite docs/performance.md and the README block
    python scripts/gen_performance_doc.py --check   # exit 1 (naming what is stale) when either is out of date

Provenance of each file: the JSON's own ``date`` / ``commit`` / ``machine`` fields when it has them;
otherwise the date and commit of the last git commit that changed the file (``git log -1 -- FILE``:
when the results were recorded), and the machine from the fields the benchmark records (CPU count,
filesystem, load average). A file with uncommitted changes is marked ``uncommitted``; commit it,
then regenerate. The page records each file's SHA-256 beside its date and commit: a file whose
bytes still match keeps the recorded date and commit, so ``--check`` needs no git history (a
shallow clone or a copy without ``.git`` checks the same) and a new or changed file is stale until
the page is regenerated. No clock is read, so a test can compare the committed page with a fresh
rendering (``tests/unit/test_performance_doc.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path("benchmarks/results")
PAGE = Path("docs/performance.md")
README = Path("README.md")
README_BEGIN = "<!-- performance-comparison:begin (generated: python scripts/gen_performance_doc.py) -->"
README_END = "<!-- performance-comparison:end -->"
MOONCAKE_URL = "https://github.com/kvcache-ai/Mooncake"
SGLANG_URL = "https://github.com/sgl-project/sglang"
FIO_URL = "https://github.com/axboe/fio"


@dataclass(frozen=True)
class Provenance:
    date: str
    commit: str
    machine: str
    source: str  # "the file" or "git log"


def fmt(value: Any, digits: int = 2) -> str:
    """A number as the page prints it; anything else as text; a missing value as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    return str(value)


def size_name(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", f"safe.directory={repo}", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def _machine(data: dict[str, Any]) -> str:
    if isinstance(data.get("machine"), str):
        return str(data["machine"])
    parts = []
    if isinstance(data.get("fs_type"), str):
        parts.append(f"{data['fs_type']} at `{data.get('dir', '?')}`")
    load = data.get("load_average")
    if isinstance(load, list) and load:
        load = load[0]
    if isinstance(load, (int, float)):
        parts.append(f"load average {load:.1f} at the start")
    host = data.get("host")
    speeds = _host_speeds(host) if isinstance(host, dict) else ""
    if speeds:
        parts.append(speeds)
    cpus = data.get("cpu_count", data.get("cpus"))
    if not isinstance(cpus, int) and isinstance(host, dict):
        cpus = host.get("cpu_count")
    if isinstance(cpus, int):
        return f"a {cpus}-CPU VM of this project" + (f" ({', '.join(parts)})" if parts else "")
    return "a 2-core VM of this project (the file records no machine)"


def _host_speeds(host: dict[str, Any]) -> str:
    """The ``host`` block ``bench --json`` adds (``tools.host_probe``) in words: the CPU
    model and the reference speeds before and after the run."""

    def speed(probe: Any) -> str:
        if not isinstance(probe, dict):
            return "?"
        loops, copy = probe.get("python_loops_per_s"), probe.get("memcpy_gbps")
        if not isinstance(loops, (int, float)) or not isinstance(copy, (int, float)):
            return "?"
        return f"{loops / 1e6:.0f}M Python loops/s and memcpy at {copy:.1f} GB/s"

    model = host.get("cpu_model")
    words = f"{model}: " if isinstance(model, str) else ""
    return f"{words}{speed(host.get('before'))} before the run, {speed(host.get('after'))} after"


RECORDED_ROW = re.compile(
    r"^\| \[`(?P<name>[^`]+)`\]\([^)]*\) \| .* \| (?P<date>[^|]+) \| `(?P<commit>[^`]+)` \| `(?P<sha>[0-9a-f]+)` \|$",
    re.M,
)


@dataclass(frozen=True)
class Recorded:
    date: str
    commit: str
    sha: str


def recorded_in(page_text: str) -> dict[str, Recorded]:
    """File name -> the date, commit and content hash the page's table recorded for it."""
    return {
        m["name"]: Recorded(m["date"].strip(), m["commit"], m["sha"])
        for m in RECORDED_ROW.finditer(page_text)
    }


def content_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def provenance(
    repo: Path,
    rel: Path,
    data: dict[str, Any],
    recorded: dict[str, Recorded] | None = None,
    use_git: bool = True,
) -> Provenance:
    """Where the figures of ``rel`` come from. With ``use_git`` False a file the page does not
    already record (by content hash) gets ``not recorded``, which no committed page contains."""
    machine = _machine(data)
    date, commit = data.get("date"), data.get("commit")
    if isinstance(date, str) and isinstance(commit, str):
        return Provenance(date, commit, machine, "the file")
    known = (recorded or {}).get(rel.name)
    if known is not None and known.sha == content_sha(repo / rel) and known.commit != "uncommitted":
        return Provenance(known.date, known.commit, machine, "git log")
    if not use_git:
        return Provenance("not recorded", "not recorded", machine, "nowhere: regenerate the page")
    if _git(repo, "status", "--porcelain", "--", str(rel)):
        return Provenance("uncommitted", "uncommitted", machine, "git status")
    line = _git(repo, "log", "-1", "--format=%cI %h", "--", str(rel))
    if not line:
        return Provenance("uncommitted", "uncommitted", machine, "git log")
    when, sha = line.split()
    return Provenance(when.replace("T", " ").replace("+00:00", " UTC"), sha, machine, "git log")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


# ------------------------------------------------------------------ one renderer per benchmark


def render_sglang(d: dict[str, Any]) -> list[str]:
    lines = [
        "Our backend through SGLang's own classes (its `StorageBackendFactory`, host pools on CPU) "
        f"against memcpy and SGLang's `file` backend ([SGLang]({SGLANG_URL})).",
        "",
    ]
    lines += table(
        ["headline (worst case over page sizes)", "ratio"],
        [
            ["set vs SGLang's `file` backend", fmt(d.get("set_ratio_vs_file"))],
            ["get vs SGLang's `file` backend", fmt(d.get("get_ratio_vs_file"))],
            ["DRAM tier vs memcpy, 1-8 MiB pages", fmt(d.get("dram_ratio_vs_memcpy"))],
            ["default preset (SSD off) vs memcpy, 1-8 MiB", fmt(d.get("default_config_ratio_vs_memcpy"))],
            ["into a full cache (every set evicts) vs memcpy", fmt(d.get("full_cache_set_ratio_vs_memcpy"))],
            ["DRAM tier vs memcpy, pages below 1 MiB", fmt(d.get("small_page_dram_ratio_vs_memcpy"))],
            ["next to a busy Python thread vs alone", fmt(d.get("busy_ratio_vs_alone"))],
            [
                "host cache (set in one process, get in another) vs memcpy",
                fmt(d.get("host_cache_ratio_vs_memcpy")),
            ],
            [
                "host cache, into a full cache (every set makes room) vs memcpy",
                fmt(d.get("host_cache_full_set_ratio_vs_memcpy")),
            ],
        ],
    )
    rows = [
        [
            size_name(p["page_bytes"]),
            fmt(p.get("ours_set_gbps")),
            fmt(p.get("ours_get_gbps")),
            fmt(p.get("memcpy_set_gbps")),
            fmt(p.get("memcpy_get_gbps")),
            fmt(p.get("file_set_gbps")),
            fmt(p.get("file_get_gbps")),
        ]
        for p in d.get("per_page_size", [])
    ]
    lines += [""]
    lines += table(
        ["page", "ours set", "ours get", "memcpy set", "memcpy get", "`file` set", "`file` get"], rows
    )
    lines += ["", "GB/s (10^9 B/s), medians."]
    return lines


def render_ssd(d: dict[str, Any]) -> list[str]:
    lines = [
        f"The SSD tier against [fio]({FIO_URL}) on the same directory (fio at its best configuration "
        f"tried) and SGLang's `file` backend; page cache dropped before reads: {fmt(d.get('cache_drop_ok'))}.",
        "",
    ]
    rows = []
    for p in d.values():
        if not (isinstance(p, dict) and "page_bytes" in p):
            continue
        rows.append(
            [
                size_name(p["page_bytes"]),
                fmt(p.get("ours_set_gbps")),
                fmt(p.get("ours_get_gbps")),
                fmt(p.get("fio_set_gbps")),
                fmt(p.get("fio_get_gbps")),
                fmt(p.get("set_ratio_vs_fio")),
                fmt(p.get("get_ratio_vs_fio")),
                fmt(p.get("set_ratio_vs_sglang_file")),
                fmt(p.get("get_ratio_vs_sglang_file")),
                fmt(p.get("ours_get_cpu_s_per_gb")),
            ]
        )
    lines += table(
        [
            "page",
            "ours set",
            "ours get",
            "fio write",
            "fio read",
            "set / fio",
            "get / fio",
            "set / `file`",
            "get / `file`",
            "get CPU s/GB",
        ],
        rows,
    )
    targets = d.get("targets", {})
    if targets:
        lines += ["", "Targets: " + ", ".join(f"`{k}` {fmt(v)}" for k, v in targets.items()) + "."]
    return lines + ["", "GB/s (10^9 B/s), medians of per-round ratios."]


def render_remote(d: dict[str, Any]) -> list[str]:
    lines = [
        "The remote tier with our memory nodes (`provider: nodes`) over loopback, against a raw-socket "
        f"ceiling and [Mooncake Store]({MOONCAKE_URL}) (master + segment holder, Transfer Engine over TCP).",
        "",
    ]
    rows = []
    for name, p in d.get("pages", {}).items():
        tcp, local, sock, mc = (p.get(k, {}) for k in ("tcp", "local", "socket", "mooncake"))
        rows.append(
            [
                name,
                fmt(tcp.get("put")),
                fmt(tcp.get("get")),
                fmt(local.get("put")),
                fmt(local.get("get")),
                fmt(sock.get("put")),
                fmt(sock.get("get")),
                fmt(mc.get("put")),
                fmt(mc.get("get")),
                fmt(p.get("put_ratio_vs_mooncake")),
                fmt(p.get("get_ratio_vs_mooncake")),
            ]
        )
    lines += table(
        [
            "page",
            "tcp put",
            "tcp get",
            "local put",
            "local get",
            "socket put",
            "socket get",
            "Mooncake put",
            "Mooncake get",
            "put / Mooncake",
            "get / Mooncake",
        ],
        rows,
    )
    return lines + ["", "GB/s (10^9 B/s), medians of repeats; ratios: our `tcp` engine / baseline."]


def render_remote_mooncake(d: dict[str, Any]) -> list[str]:
    wheel = d.get("run", {}).get("wheel_version", "?")
    lines = [
        "Our remote tier with `provider: mooncake` against the bare Mooncake client doing the same puts "
        f"and gets, in one process, against one master and one segment holder ([Mooncake]({MOONCAKE_URL}) "
        f"wheel {wheel}, Transfer Engine over TCP on loopback).",
        "",
    ]
    rows = []
    for name, p in d.get("pages", {}).items():
        ours, bare = p.get("ours", {}), p.get("mooncake_client", {})
        rows.append(
            [
                name,
                fmt(ours.get("put")),
                fmt(ours.get("get")),
                fmt(bare.get("put")),
                fmt(bare.get("get")),
                fmt(p.get("put_ratio_vs_mooncake_client")),
                fmt(p.get("get_ratio_vs_mooncake_client")),
            ]
        )
    lines += table(
        [
            "page",
            "ours put",
            "ours get",
            "Mooncake client put",
            "Mooncake client get",
            "put ratio",
            "get ratio",
        ],
        rows,
    )
    return lines + ["", "GB/s (10^9 B/s), medians of repeats."]


def render_scale(d: dict[str, Any]) -> list[str]:
    lines = ["The default preset with many entries: memory per entry, `exists` latency, reopen time.", ""]
    rows = [
        [
            fmt(p.get("entries")),
            fmt(p.get("bytes_per_entry"), 0),
            fmt(p.get("exists_p50_us"), 1),
            fmt(p.get("exists_p99_us"), 1),
            fmt(p.get("reopen_clean_s")),
            fmt(p.get("reopen_after_kill_s")),
        ]
        for p in d.get("per_entries", [])
    ]
    lines += table(
        [
            "entries",
            "RAM bytes / entry",
            "exists p50 us",
            "exists p99 us",
            "reopen clean s",
            "reopen after kill s",
        ],
        rows,
    )
    targets = d.get("targets", {})
    if targets:
        lines += ["", "Targets: " + ", ".join(f"`{k}` {fmt(v)}" for k, v in targets.items()) + "."]
    return lines


def render_gil_io(d: dict[str, Any]) -> list[str]:
    lines = [
        f"{size_name(d.get('size_bytes', 0))} O_DIRECT writes and reads from {d.get('io_threads', '?')} Python "
        "threads, alone and beside what shares SGLang's interpreter (no tier of ours in it).",
        "",
    ]
    rows = [
        [
            name,
            fmt(c.get("write_gbps")),
            fmt(c.get("read_gbps")),
            fmt(c.get("write_ratio_vs_alone")),
            fmt(c.get("read_ratio_vs_alone")),
            fmt(c.get("mixed_ratio_vs_alone")),
        ]
        for name, c in d.get("cases", {}).items()
    ]
    lines += table(
        ["case", "write GB/s", "read GB/s", "write / alone", "read / alone", "mixed / alone"], rows
    )
    return lines


def render_gil(d: dict[str, Any]) -> list[str]:
    lines = [
        f"A pure-Python busy thread (SGLang's scheduler) beside one backup and two prefetch threads, "
        f"{size_name(d.get('page_bytes', 0))} pages, {fmt(d.get('batch_pages'))} per call; "
        f"`gil_wait_share` is the busy thread's time blocked on the GIL (kernel accounting; time waiting "
        f"for a core is `cpu queue`). Headline (worse of ours): {fmt(d.get('gil_wait_share'), 3)}, "
        f"Mooncake's client {fmt(d.get('gil_wait_share_mooncake'), 3)}, target <= "
        f"{fmt(d.get('target_gil_wait_share'))}: {'met' if d.get('meets_target') else 'not met'}. "
        f"Threads run at full speed, so a leg that moves more bytes takes the GIL more often: "
        f"`GIL wait ms / GB` is the busy thread's wait per GB the leg moved.",
        "",
    ]
    rows = []
    for name, leg in d.get("legs", {}).items():
        if "gil_wait_share" not in leg:
            rows.append([name, str(leg.get("not_measured") or leg.get("error")), "", "", "", "", ""])
            continue
        rows.append(
            [
                name,
                fmt(leg.get("gil_wait_share"), 3),
                fmt(leg.get("gil_wait_ms_per_gb"), 1),
                fmt(leg.get("cpu_queue_share")),
                fmt(leg.get("busy_ratio_vs_alone")),
                fmt(leg.get("io_gbps")),
                fmt(leg.get("io_ratio_vs_alone")),
                f"{fmt(leg.get('failed_pages'))} / {fmt(leg.get('bad_pages'))}",
            ]
        )
    lines += table(
        [
            "leg",
            "gil_wait_share",
            "GIL wait ms / GB",
            "cpu queue",
            "busy / alone",
            "I/O GB/s",
            "I/O / alone",
            "failed / bad pages",
        ],
        rows,
    )
    return lines


def render_rewarm(d: dict[str, Any]) -> list[str]:
    lines = [
        f"A restart in the middle of a trace replay (request {fmt(d.get('restart_at_request'))} of "
        f"{fmt(d.get('requests'))}): no restart, a cold restart, a warm restart from the snapshot.",
        "",
    ]
    rows = []
    for name, m in d.get("modes", {}).items():
        to90 = m.get("to_90_percent_of_no_restart")
        rows.append(
            [
                name,
                fmt(m.get("restart_s")),
                fmt(m.get("first_window_dram_hit_rate"), 3),
                fmt(to90.get("requests") if isinstance(to90, dict) else None),
                fmt(m.get("wrong_bytes")),
            ]
        )
    lines += table(
        ["mode", "restart s", "DRAM hit rate, first window", "requests to 90% of no restart", "wrong bytes"],
        rows,
    )
    return lines


def render_replay(d: dict[str, Any]) -> list[str]:
    hints = d.get("hints")
    lines = [
        f"The `{d.get('policy')}` policy on a Mooncake-format trace ({fmt(d.get('requests'))} requests) at "
        f"{fmt(d.get('capacity_fraction'))} of its unique blocks, mode `{d.get('mode')}`, "
        f"hints: {'simulated' if hints else 'none'}.",
        "",
    ]
    lines += table(
        ["hit rate", "LRU", "OPT", "share of the LRU->OPT gap", "policy us / access", "LRU us / access"],
        [
            [
                fmt(d.get("hit_rate"), 3),
                fmt(d.get("lru_hit_rate"), 3),
                fmt(d.get("opt_hit_rate"), 3),
                fmt(d.get("gap_fraction"), 3),
                fmt(d.get("policy_us_per_access")),
                fmt(d.get("lru_us_per_access")),
            ]
        ],
    )
    return lines


def render_families(d: dict[str, Any]) -> list[str]:
    fractions = d.get("fractions", [])
    lines = [
        f"Share of the LRU->OPT gap, `(hit - LRU) / (OPT - LRU)`, of the `{d.get('policy')}` policy per trace "
        f"family and capacity; prefix keys: {fmt(d.get('prefix_keys'))}, hints: "
        f"{'simulated' if d.get('hints') else 'none'}; never below LRU: {fmt(d.get('never_below_lru'))}.",
        "",
    ]
    rows = [
        [name] + [fmt(cell.get("gap_fraction"), 3) for cell in cells]
        for name, cells in d.get("rows", {}).items()
    ]
    return lines + table(["trace"] + [f"{f:.0%}" for f in fractions], rows)


def render_cross_tp(d: dict[str, Any]) -> list[str]:
    lines = [
        f"{d.get('what', '')}; best of {fmt(d.get('repeats'))} passes of {fmt(d.get('mib_per_pass'))} MiB.",
        "",
    ]
    rows = [
        [
            f"{int(r['page_bytes']) >> 10} KiB",
            str(r.get("layout")),
            fmt(r.get("tp_lcm_size")),
            fmt(r.get("index_entries_per_page")),
            fmt(r.get("store_calls_per_batch")),
            "yes" if r.get("zero_copy") else "staged",
            fmt(r.get("set_gbps")),
            fmt(r.get("get_gbps")),
        ]
        for r in d.get("rows", [])
    ]
    return lines + table(
        [
            "page",
            "layout",
            "tp_lcm_size",
            "index entries/page",
            "store calls/batch",
            "copy",
            "set GB/s",
            "get GB/s",
        ],
        rows,
    )


def render_lookup(d: dict[str, Any]) -> list[str]:
    lines = [
        f"`POST /v1/lookup` of {fmt(d.get('keys'))} page hashes over {fmt(d.get('pages'))} pages held "
        f"({d.get('tiers')}), {fmt(d.get('load_threads'))} set/get threads beside it; "
        f"{fmt((d.get('http') or {}).get('n'))} requests per stage.",
        "",
    ]
    stages = ("where_batch", "handler", "http", "http_via_worker")
    rows = [
        [f"`{k}`", fmt(d[k].get("p50_ms"), 3), fmt(d[k].get("p99_ms"), 3), fmt(d[k].get("max_ms"), 3)]
        for k in stages
        if isinstance(d.get(k), dict)
    ]
    return lines + table(["stage", "p50 ms", "p99 ms", "max ms"], rows)


def render_generic(d: dict[str, Any]) -> list[str]:
    rows = [
        [f"`{k}`", fmt(v)] for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    return table(["field", "value"], rows) if rows else ["(no scalar figures at the top level)"]


@dataclass(frozen=True)
class Kind:
    title: str
    command: str
    render: Callable[[dict[str, Any]], list[str]]


KINDS: dict[str, Kind] = {
    "bench_sglang": Kind(
        "Through SGLang: vs memcpy and SGLang's `file` backend", "bench sglang", render_sglang
    ),
    "bench_ssd": Kind("SSD tier: vs fio and SGLang's `file` backend", "bench ssd", render_ssd),
    "bench_remote": Kind(
        "Remote pool, our memory nodes: vs a socket ceiling and Mooncake Store", "bench remote", render_remote
    ),
    "bench_remote_mooncake": Kind(
        "Remote pool on Mooncake Store: vs the bare Mooncake client",
        "bench remote --provider mooncake",
        render_remote_mooncake,
    ),
    "bench_scale": Kind("Scale: memory per entry, exists latency, reopen", "bench scale", render_scale),
    "bench_gil": Kind("The scheduler's GIL beside our threads", "bench gil", render_gil),
    "bench_gil_io": Kind("Python I/O threads beside SGLang's interpreter", "bench gil_io", render_gil_io),
    "bench_rewarm": Kind("Warm restart", "bench rewarm", render_rewarm),
    "bench_lookup": Kind(
        "Lookup API: which tier holds each page, per request", "bench lookup", render_lookup
    ),
    "bench_cross_tp": Kind(
        "Cross-TP head groups: what `tp_lcm_size` costs", "bench cross_tp", render_cross_tp
    ),
    "replay_public": Kind("Policy: the public conversation trace", "replay TRACE", render_replay),
    "replay_public_hints": Kind(
        "Policy: the public trace with simulated hints", "replay TRACE --hints simulated", render_replay
    ),
    "replay_families": Kind(
        "Policy: trace families", "python -m hicache_mooncake.tools.replay.families", render_families
    ),
    "replay_families_hints": Kind(
        "Policy: trace families with simulated hints",
        "python -m hicache_mooncake.tools.replay.families --hints simulated",
        render_families,
    ),
    "replay_families_no_prefix_keys": Kind(
        "Policy: trace families without prefix keys",
        "python -m hicache_mooncake.tools.replay.families --no-prefix-keys",
        render_families,
    ),
}


def result_files(repo: Path) -> list[Path]:
    return sorted((repo / RESULTS).glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a benchmark result must be a JSON object, not {type(data).__name__}")
    return data


def render_page(repo: Path = REPO, recorded: dict[str, Recorded] | None = None, use_git: bool = True) -> str:
    lines = [
        "# Performance",
        "",
        "<!-- generated by `python scripts/gen_performance_doc.py` from benchmarks/results/*.json; do not edit -->",
        "",
        "Every figure on this page is read from a file in `benchmarks/results/`, written by the benchmark "
        "named under its heading (`hicache-mooncake bench ...`; all of them: `benchmarks/run_all.sh`). Each "
        "section says when and where it was measured: the date and commit are the file's own fields when it "
        "has them, otherwise those of the last git commit that changed the file (when the results were "
        "recorded; `git log -1 -- FILE`); the machine is what the file records. Regenerate this page after "
        "committing a new result: `python scripts/gen_performance_doc.py` (a test fails while it is stale).",
        "",
        "How each figure was found, the runs before these and what moved them: "
        "[performance-notes.md](performance-notes.md). Ratios are ours / the baseline, measured side by "
        "side in one run; absolute GB/s depend on the machine (2 shared vCPUs here) and move between runs.",
        "",
        "| file | benchmark | date | commit | SHA-256 of the file |",
        "|---|---|---|---|---|",
    ]
    sections: list[str] = []
    for path in result_files(repo):
        rel = path.relative_to(repo)
        data = load(path)
        kind = KINDS.get(path.stem, Kind(f"`{path.stem}`", "see the file", render_generic))
        prov = provenance(repo, rel, data, recorded, use_git)
        anchor = path.stem.replace("_", "-")
        lines.append(
            f"| [`{path.name}`](../{rel.as_posix()}) | [{kind.title}](#{anchor}) | {prov.date} | `{prov.commit}` "
            f"| `{content_sha(path)}` |"
        )
        sections += ["", f'<a id="{anchor}"></a>', "", f"## {kind.title}", ""]
        sections += [
            f"`{path.name}` — command: `{kind.command}`; measured: {prov.date}, commit `{prov.commit}` "
            f"(from {prov.source}); machine: {prov.machine}.",
            "",
        ]
        sections += kind.render(data)
        plot = path.with_suffix(".png")
        if plot.exists():
            sections += ["", f"Plot: [{plot.name}](../{plot.relative_to(repo).as_posix()})."]
    return "\n".join(lines + sections) + "\n"


def _ratio_row(
    what: str,
    baseline: str,
    figure: str,
    stem: str,
    repo: Path,
    recorded: dict[str, Recorded] | None,
    use_git: bool,
) -> list[str]:
    path = repo / RESULTS / f"{stem}.json"
    prov = provenance(repo, path.relative_to(repo), load(path), recorded, use_git)
    day = prov.date.split(" ")[0]
    return [what, baseline, figure, f"[{day}, `{prov.commit}`](docs/performance.md#{stem.replace('_', '-')})"]


def render_readme_block(
    repo: Path = REPO, recorded: dict[str, Recorded] | None = None, use_git: bool = True
) -> str:
    """The README's measured comparison rows: only figures that exist in the results."""
    rows: list[list[str]] = []
    res = repo / RESULTS
    if (res / "bench_remote_mooncake.json").exists():
        d = load(res / "bench_remote_mooncake.json")
        for page, p in d.get("pages", {}).items():
            rows.append(
                _ratio_row(
                    f"remote pool via `provider: mooncake`, {page} pages",
                    f"[Mooncake]({MOONCAKE_URL})'s own client, same cluster",
                    f"put {fmt(p.get('put_ratio_vs_mooncake_client'))}x, get {fmt(p.get('get_ratio_vs_mooncake_client'))}x",
                    "bench_remote_mooncake",
                    repo,
                    recorded,
                    use_git,
                )
            )
    if (res / "bench_remote.json").exists():
        d = load(res / "bench_remote.json")
        for page, p in d.get("pages", {}).items():
            if p.get("get_ratio_vs_mooncake") is None:
                continue
            rows.append(
                _ratio_row(
                    f"remote pool on our memory nodes (tcp), {page} pages",
                    f"[Mooncake Store]({MOONCAKE_URL}) put/get, TCP, one holder",
                    f"put {fmt(p.get('put_ratio_vs_mooncake'))}x, get {fmt(p.get('get_ratio_vs_mooncake'))}x",
                    "bench_remote",
                    repo,
                    recorded,
                    use_git,
                )
            )
    if (res / "bench_sglang.json").exists():
        d = load(res / "bench_sglang.json")
        rows.append(
            _ratio_row(
                "default preset through SGLang (DRAM), worst page size",
                f"[SGLang]({SGLANG_URL})'s `file` backend (warm page cache)",
                f"set {fmt(d.get('set_ratio_vs_file'))}x, get {fmt(d.get('get_ratio_vs_file'))}x",
                "bench_sglang",
                repo,
                recorded,
                use_git,
            )
        )
    if (res / "bench_ssd.json").exists():
        d = load(res / "bench_ssd.json")
        for p in d.values():
            if isinstance(p, dict) and "page_bytes" in p:
                rows.append(
                    _ratio_row(
                        f"SSD tier, {size_name(p['page_bytes'])} pages",
                        f"[fio]({FIO_URL}) on the same disk / SGLang's `file` backend",
                        f"set {fmt(p.get('set_ratio_vs_fio'))}x / {fmt(p.get('set_ratio_vs_sglang_file'))}x, "
                        f"get {fmt(p.get('get_ratio_vs_fio'))}x / {fmt(p.get('get_ratio_vs_sglang_file'))}x",
                        "bench_ssd",
                        repo,
                        recorded,
                        use_git,
                    )
                )
    body = table(["ours", "against", "ratio (ours / theirs)", "measured"], rows)
    return "\n".join([README_BEGIN, "", *body, "", README_END])


def replace_block(text: str, block: str) -> str:
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    return text[:start] + block + text[end:]


def _recorded(repo: Path) -> dict[str, Recorded]:
    page = repo / PAGE
    return recorded_in(page.read_text(encoding="utf-8")) if page.exists() else {}


def stale(repo: Path = REPO) -> list[str]:
    """The generated files that differ from a fresh rendering (empty: all current). Reads no git:
    the dates and commits are those the page records for files whose bytes it recorded."""
    out = []
    recorded = _recorded(repo)
    page = repo / PAGE
    if not page.exists() or page.read_text(encoding="utf-8") != render_page(repo, recorded, use_git=False):
        out.append(str(PAGE))
    readme = (repo / README).read_text(encoding="utf-8")
    block = render_readme_block(repo, recorded, use_git=False)
    if README_BEGIN not in readme or README_END not in readme or block not in readme:
        out.append(str(README))
    return out


def write(repo: Path = REPO) -> None:
    page = render_page(repo, _recorded(repo))
    (repo / PAGE).write_text(page, encoding="utf-8")
    block = render_readme_block(repo, recorded_in(page), use_git=False)
    readme = repo / README
    readme.write_text(replace_block(readme.read_text(encoding="utf-8"), block), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when docs/performance.md or the README is stale"
    )
    parser.add_argument("--repo", type=Path, default=REPO, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale(args.repo)
        for name in out_of_date:
            print(f"{name} is stale: run python scripts/gen_performance_doc.py", file=sys.stderr)
        return 1 if out_of_date else 0
    write(args.repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
