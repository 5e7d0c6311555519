"""The committed figures read right: a replay plot is titled by the trace's file name (not a
machine path), and the benchmark figures put their legend under the axes, where it covers no bar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hicache_mooncake.cli import main
from hicache_mooncake.tools.replay.trace import generate_trace, write_trace

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every figure written with ``savefig`` (the real call still writes the file)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    saved: list[Any] = []
    write = Figure.savefig

    def savefig(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved.append(self)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def test_a_replay_plot_is_titled_by_the_trace_file_name(tmp_path: Path, saved_figures: list[Any]) -> None:
    trace = tmp_path / "deep" / "dir" / "my_trace.jsonl"
    trace.parent.mkdir(parents=True)
    write_trace(trace, generate_trace("chat", seed=2)[:300])
    out = tmp_path / "r.png"
    assert main(["replay", str(trace), "--plot", str(out), "--no-progress"]) == 0
    [fig] = saved_figures
    title = fig.axes[0].get_title()
    assert title.startswith("my_trace.jsonl") and str(tmp_path) not in title
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sglang_bench_figure_has_its_legend_under_the_axes(
    tmp_path: Path, saved_figures: list[Any]
) -> None:
    from hicache_mooncake.tools.bench.sglang import _plot

    rows = json.loads((RESULTS / "bench_sglang.json").read_text())["per_page_size"]
    _plot(rows, str(tmp_path / "b.png"))
    [fig] = saved_figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [legend] = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert box.y1 <= ax.get_window_extent(renderer).y0  # below every plot area: covers no bar
        assert ax.get_legend() is None  # one legend for the figure, not one inside an axes
    labels = [t.get_text() for t in legend.get_texts()]
    full = "hicache-mooncake, full cache (each set evicts)"
    assert labels == ["hicache-mooncake (DRAM)", full, "SGLang file", "memcpy"]
    # one colour per series in both panels (the legend is the set panel's); sets only for the full cache
    colours: dict[str, set[tuple[float, ...]]] = {}
    for ax in fig.axes:
        for bars in ax.containers:
            colours.setdefault(bars.get_label(), set()).update(p.get_facecolor() for p in bars)
    assert set(colours) == set(labels) and all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == len(labels)
    assert [b.get_label() for b in fig.axes[1].containers] == [
        "hicache-mooncake (DRAM)",
        "SGLang file",
        "memcpy",
    ]
