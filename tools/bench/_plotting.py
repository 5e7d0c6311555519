"""Plot details the benchmark figures share."""

from __future__ import annotations

from typing import Any


def legend_below(fig: Any, ax: Any, fontsize: int = 8) -> None:
    """One legend for the figure, in a row under the axes, so it never covers a bar; then lay the
    figure out with room for it."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=fontsize)
    fig.tight_layout(rect=(0, 0.07, 1, 1))


def legend_under(ax: Any, fontsize: int = 8) -> None:
    """The axes' legend in rows under its x labels, so it never covers a bar or a line (the figure
    needs ``layout="constrained"`` to keep room for it)."""
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=min(len(labels), 2),
        frameon=False,
        fontsize=fontsize,
    )
