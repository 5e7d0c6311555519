"""``bench remote --provider mooncake``: our remote tier over Mooncake Store next to the bare
Mooncake client, doing the same puts and gets in the same run (not a bench target itself).

Both series run in ONE process of ``_mooncake_runner bench --provider`` inside a private network
namespace (``unshare -n``; Mooncake's Transfer Engine and the master's HTTP metadata server listen
on every interface), against one ``mooncake_master`` and one segment-holder process: every byte
crosses the Transfer Engine's TCP transport on loopback. Per page size:

- ``mooncake_client``: ``MooncakeDistributedStore`` with registered source/destination buffers,
  ``batch_put_from_multi_buffers`` / ``batch_get_into_multi_buffers``, each page ONE object of two
  parts (K and V halves);
- ``ours``: ``RemoteDramTier`` with the ``mooncake`` provider (its own client, the buffers announced
  through ``register_memory``, the deadline guard, counters), the same pages, parts and batches.

Repeats alternate the order of the series; a repeat's figure = bytes / sum of its batched calls'
own durations (every page read back is verified, untimed). Reported: GB/s medians and samples,
``get_ratio_vs_mooncake_client`` / ``put_ratio_vs_mooncake_client`` (ours / bare), and client CPU
seconds per GB moved (process CPU of every thread during the timed calls) for both. The wheel must
already be installed (``requirements/mooncake.txt``; ``scripts/dev.sh`` installs it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from typing import Any

from hicache_mooncake.tools.results_json import write_json

MiB = 1 << 20
RUNNER_MODULE = "hicache_mooncake.tools.bench._mooncake_runner"


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def run_provider_mooncake(args: argparse.Namespace) -> int:
    sizes = [int(s.strip().lower().removesuffix("mib")) * MiB for s in args.sizes.split(",")]
    total, batch = args.total_mib * MiB, args.batch_mib * MiB
    result: dict[str, Any] = {
        "provider": "mooncake",
        "unit": "GB/s (1e9 B/s), median of repeats (samples listed); ratios = ours / mooncake_client",
        "method": __doc__.strip().split("\n\n", 2)[1] if __doc__ else "",
        "total_bytes": total,
        "batch_bytes": batch,
        "repeats": args.repeats,
        "pages": {},
    }
    probe = subprocess.run([sys.executable, "-c", "import mooncake.store"], capture_output=True, text=True)
    if probe.returncode != 0:
        result["reason"] = (
            "mooncake.store is not importable (install requirements/mooncake.txt with --no-deps, and "
            f"Debian's libibverbs1): {probe.stderr.strip()[-400:]}"
        )
        print(result["reason"])
        _write(args, result)
        return 1
    cmd = [shutil.which("unshare") or "unshare", "-n", "--", sys.executable, "-m", RUNNER_MODULE, "bench"]
    cmd += ["--provider", "--sizes", ",".join(str(s) for s in sizes), "--total", str(total)]
    cmd += ["--batch", str(batch), "--repeats", str(args.repeats)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.mooncake_timeout)
    except subprocess.TimeoutExpired:
        result["reason"] = f"the Mooncake run did not finish within {args.mooncake_timeout:g} s"
        print(result["reason"])
        _write(args, result)
        return 1
    payload = _line(proc.stdout, "MOONCAKE_RESULT")
    if payload is None:
        err = _line(proc.stdout, "MOONCAKE_ERROR")
        result["reason"] = (err or {}).get("error") or f"runner exit {proc.returncode}: {proc.stderr[-800:]}"
        print(f"Mooncake run failed: {result['reason']}")
        _write(args, result)
        return 1
    result["run"] = {k: v for k, v in payload.items() if k != "pages"} | {"command": cmd}
    for name, entry in payload["pages"].items():
        ours, bare = entry["ours"], entry["mooncake_client"]
        entry["get_ratio_vs_mooncake_client"] = _ratio(ours["get"], bare["get"])
        entry["put_ratio_vs_mooncake_client"] = _ratio(ours["put"], bare["put"])
        result["pages"][name] = entry
        print(
            f"{name:>5} pages (GB/s get/put): mooncake_client {bare['get']:.2f}/{bare['put']:.2f} | "
            f"ours {ours['get']:.2f}/{ours['put']:.2f} | ours/client: get "
            f"{entry['get_ratio_vs_mooncake_client']:.2f} put {entry['put_ratio_vs_mooncake_client']:.2f} | "
            f"CPU s/GB get/put: client {bare['get_cpu_s_per_gb']:.2f}/{bare['put_cpu_s_per_gb']:.2f} "
            f"ours {ours['get_cpu_s_per_gb']:.2f}/{ours['put_cpu_s_per_gb']:.2f}"
        )
    _write(args, result)
    if args.plot_out:
        plot_provider(result, args.plot_out)
    return 0


def _line(stdout: str, kind: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        head, _, body = line.partition(" ")
        if head == kind:
            out: dict[str, Any] = json.loads(body)
            return out
    return None


def _write(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.json_out:
        write_json(args.json_out, result)


def plot_provider(result: dict[str, Any], path: str) -> None:
    """Both series per page size; the titles say how they store a page, which is not how
    ``bench remote``'s own ``mooncake`` series does (one buffer per object), so the two figures'
    Mooncake bars are different measurements."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hicache_mooncake.tools.bench._plotting import legend_under

    pages = list(result["pages"])
    series = {
        "mooncake_client": "Mooncake client alone",
        "ours": "ours: remote tier, mooncake provider",
    }
    fig, axes = plt.subplots(1, 2, figsize=(10, 5.4), layout="constrained")
    width = 0.38
    for ax, op in zip(axes, ("get", "put"), strict=True):
        for i, (s, label) in enumerate(series.items()):
            vals = [result["pages"][pg][s][op] for pg in pages]
            bars = ax.bar([p + i * width for p in range(len(pages))], vals, width, label=label)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        labels = [
            f"{pg}\nours/client {result['pages'][pg][f'{op}_ratio_vs_mooncake_client']:.2f}" for pg in pages
        ]
        ax.set_xticks([p + width / 2 for p in range(len(pages))], labels, fontsize=8)
        ax.set_title(op)
        ax.set_ylabel("GB/s")
        legend_under(ax)
    fig.suptitle(
        f"bench remote --provider mooncake: Mooncake Store over TE TCP, loopback, median of {result['repeats']}\n"
        "each page ONE object of two parts (multi-buffer calls), as our tier stores it; a separate run\n"
        "from bench_remote.png, whose mooncake bars use one buffer per object: do not compare across",
        fontsize=10,
    )
    fig.savefig(path)
    plt.close(fig)
