"""The replay plot: hit rate vs capacity fraction for the policy, LRU and OPT."""

from __future__ import annotations

from pathlib import Path


def plot_sweep(sweep: dict[str, list[float]], policy: str, out: str | Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    xs = [100 * f for f in sweep["fraction"]]
    ax.plot(xs, sweep["opt"], "k--", marker="^", label="OPT (Belady)")
    ax.plot(xs, sweep["policy"], "C0-", marker="o", label=policy)
    ax.plot(xs, sweep["lru"], "C3-", marker="s", label="LRU")
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs])
    ax.set_xlabel("capacity (% of the trace's unique blocks)")
    ax.set_ylabel("block hit rate (prefix rule)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
