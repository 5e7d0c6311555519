"""The committed figures are drawn from the committed JSON (``bench TARGET --replot JSON --plot
OUT``, nothing measured), and drawn legibly: every title inside the figure (none clipped), no
legend over a bar, and each figure names how its Mooncake series stores a page, so
``bench_remote.png`` and ``bench_remote_mooncake.png`` (different calls, different runs) are not
read as contradicting each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import pytest

from hicache_mooncake.cli import main

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
FIGURES = [
    ("remote", "bench_remote"),
    ("remote", "bench_remote_mooncake"),
    ("scale", "bench_scale"),
    ("sglang", "bench_sglang"),
    ("ssd", "bench_ssd"),
    ("gil_io", "bench_gil_io"),
]


def drawn(monkeypatch: pytest.MonkeyPatch, target: str, name: str, out: Path) -> Any:
    """Redraw through the CLI and keep the figure open (``plt.close`` left out) to inspect it."""
    monkeypatch.setattr(plt, "close", lambda *_: None)
    before = set(plt.get_fignums())
    assert main(["bench", target, "--replot", str(RESULTS / f"{name}.json"), "--plot", str(out)]) == 0
    assert out.stat().st_size > 10_000
    (num,) = set(plt.get_fignums()) - before
    return plt.figure(num)


@pytest.mark.parametrize(("target", "name"), FIGURES)
def test_figures_redraw_from_json_with_nothing_clipped_or_covered(
    target: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fig = drawn(monkeypatch, target, name, tmp_path / f"{name}.png")
    try:
        renderer = fig.canvas.get_renderer()
        page = fig.bbox
        texts = [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
        texts += [t for t in fig.texts if t.get_text()]
        if fig._suptitle is not None:
            texts.append(fig._suptitle)
        for text in texts:
            if not text.get_text():
                continue
            box = text.get_window_extent(renderer)
            assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1, f"clipped: {text.get_text()!r}"
            assert page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, f"clipped: {text.get_text()!r}"
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            lbox = legend.get_window_extent(renderer)
            for other in fig.axes:
                for bar in other.patches:
                    if isinstance(bar, Rectangle) and bar.get_height() > 0:
                        assert not lbox.overlaps(bar.get_window_extent(renderer)), (
                            f"legend over a bar in {name}"
                        )
    finally:
        plt.close(fig)


def test_remote_figures_say_how_each_mooncake_series_stores_a_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def words(fig: Any) -> str:
        parts = [fig._suptitle.get_text() if fig._suptitle else ""]
        for ax in fig.axes:
            legend = ax.get_legend()
            parts += [t.get_text() for t in legend.get_texts()] if legend else []
        plt.close(fig)
        return " ".join(parts)

    nodes = words(drawn(monkeypatch, "remote", "bench_remote", tmp_path / "a.png"))
    provider = words(drawn(monkeypatch, "remote", "bench_remote_mooncake", tmp_path / "b.png"))
    assert "1 buffer/object" in nodes
    assert "two parts" in provider and "bench_remote.png" in provider


def test_replot_refuses_a_json_of_another_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.png"
    assert main(["bench", "scale", "--replot", str(RESULTS / "bench_remote.json"), "--plot", str(out)]) == 2
    assert "not a JSON this target wrote" in capsys.readouterr().err
    assert not out.exists()
