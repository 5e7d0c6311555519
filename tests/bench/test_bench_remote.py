"""``hicache-mooncake bench remote``: JSON structure on a tiny size, and the Mooncake reason being
recorded (never a crash) when Mooncake is disabled, cannot be installed or fails to run."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hicache_mooncake.tools.bench import remote

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
RATIO_KEYS = ("get_ratio_vs_socket", "put_ratio_vs_socket", "get_ratio_vs_mooncake", "put_ratio_vs_mooncake")


def _args(tmp_path: Path, **kw: Any) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--json", dest="json_out")
    p.add_argument("--plot", dest="plot_out")
    remote.add_arguments(p)
    argv = ["--sizes", "1MiB", "--total-mib", "4", "--batch-mib", "2", "--repeats", "1"]
    argv += ["--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]
    args = p.parse_args(argv)
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def _check_our_figures(entry: dict[str, Any]) -> None:
    for series in ("socket", "tcp", "local"):
        assert entry[series]["get"] > 0 and entry[series]["put"] > 0
        assert len(entry[series]["get_samples"]) == 1
    assert entry["get_ratio_vs_socket"] > 0 and entry["put_ratio_vs_socket"] > 0
    for series in ("tcp", "local"):  # ours next to a busy Python thread, beside ours alone
        figures = entry[series]
        assert figures["busy_get"] > 0 and figures["busy_put"] > 0
        assert figures["busy_get_ratio_vs_alone"] == round(figures["busy_get"] / figures["get"], 3)
        assert figures["busy_put_ratio_vs_alone"] == round(figures["busy_put"] / figures["put"], 3)


@pytest.mark.integration
def test_json_structure_no_mooncake(tmp_path: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    cmd = [sys.executable, "-m", "hicache_mooncake", "bench", "remote", "--sizes", "1MiB,2MiB"]
    cmd += ["--total-mib", "4", "--batch-mib", "2", "--repeats", "1", "--no-mooncake"]
    cmd += ["--json", str(out), "--plot", str(png)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "tcp/socket: get" in p.stdout and "disabled by --no-mooncake" in p.stdout
    res = json.loads(out.read_text())
    assert png.stat().st_size > 0
    assert set(res["pages"]) == {"1MiB", "2MiB"}
    assert res["mooncake"]["requested"] is False
    assert res["mooncake"]["reason"] == "disabled by --no-mooncake"
    for entry in res["pages"].values():
        assert all(k in entry for k in RATIO_KEYS)
        _check_our_figures(entry)
        assert entry["get_ratio_vs_mooncake"] is None and entry["put_ratio_vs_mooncake"] is None
        assert entry["mooncake_reason"] == "disabled by --no-mooncake"
        assert "mooncake" not in entry


@pytest.mark.integration
def test_reason_recorded_when_install_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mooncake absent and its install failing: the reason (pip's own words) lands in the JSON and
    the rest of the benchmark still runs."""
    monkeypatch.setattr(remote, "_mooncake_importable", lambda: (False, "No module named 'mooncake'"))
    monkeypatch.setattr(remote, "_mooncake_installed", lambda: False)
    monkeypatch.setattr(remote, "_have_ibverbs", lambda: True)
    missing = str(tmp_path / "no_such_mooncake-0.0-py3-none-any.whl")
    assert remote.run(_args(tmp_path, mooncake_spec=missing, pip_install_mooncake=True)) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    reason = res["mooncake"]["reason"]
    spec = reason.removeprefix("pip install --no-deps ").split(" failed (rc ")[0]
    assert reason.startswith("pip install --no-deps ") and " failed (rc " in reason, reason
    assert os.path.samefile(os.path.dirname(spec), tmp_path) and spec.endswith(Path(missing).name), spec
    assert any("No module named 'mooncake'" in s for s in res["mooncake"]["setup_steps"])
    entry = res["pages"]["1MiB"]
    _check_our_figures(entry)
    assert entry["get_ratio_vs_mooncake"] is None and entry["put_ratio_vs_mooncake"] is None
    assert entry["mooncake_reason"] == reason
    assert (tmp_path / "r.png").stat().st_size > 0


@pytest.mark.integration
def test_reason_recorded_when_mooncake_run_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "prepare_mooncake", lambda spec, steps, *allowed: None)
    boom = [sys.executable, "-c", "import sys; sys.stderr.write('master refused'); sys.exit(3)"]
    monkeypatch.setattr(remote, "runner_command", lambda *a: boom)
    assert remote.run(_args(tmp_path)) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    reason = res["mooncake"]["reason"]
    assert "gave no READY (exit 3)" in reason and "master refused" in reason
    assert res["pages"]["1MiB"]["get_ratio_vs_mooncake"] is None
    assert res["pages"]["1MiB"]["mooncake_reason"] == reason


@pytest.mark.integration
@pytest.mark.parametrize("device", [True, False])
def test_engine_rdma(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: bool) -> None:
    """``--engine rdma``: measured next to tcp where a device exists (here the verbs simulator, as
    the recorded pyverbs path says); without one the reason is recorded and tcp still runs."""
    from rdma_sim import Fabric, no_fabric

    ctx: Any = Fabric(tmp_path / "fabric") if device else no_fabric()
    with ctx:
        if device:
            monkeypatch.setenv("PYTHONPATH", ctx.env()["PYTHONPATH"])  # the node process too
        assert remote.run(_args(tmp_path, engines="tcp,rdma", with_mooncake=False)) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    entry = res["pages"]["1MiB"]
    assert entry["tcp"]["get"] > 0 and res["rdma"]["requested"]
    if device:
        assert res["rdma"]["reason"] is None and "fake_rdma" in res["rdma"]["pyverbs"]
        assert entry["rdma"]["get"] > 0 and entry["rdma"]["put"] > 0
    else:
        assert "devices list" in res["rdma"]["reason"] and "rdma" not in entry


def test_libibverbs_missing_without_apt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "_mooncake_importable", lambda: (False, "libibverbs.so.1: cannot open"))
    monkeypatch.setattr(remote, "_have_ibverbs", lambda: False)
    monkeypatch.setattr(remote.shutil, "which", lambda name: None)
    steps: list[str] = []
    reason = remote.prepare_mooncake(remote.MOONCAKE_PIN, steps, allow_apt=True)
    assert reason == "libibverbs.so.1 is missing and apt-get is not available to install libibverbs1"
    assert "libibverbs.so.1: cannot open" in steps[0]


def test_nothing_is_installed_without_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default neither apt-get nor pip runs: the reason names the flag that would install it."""
    ran: list[list[str]] = []
    monkeypatch.setattr(remote, "_run_quiet", lambda cmd, timeout=600: ran.append(cmd) or (1, "x"))
    monkeypatch.setattr(remote, "_mooncake_importable", lambda: (False, "No module named 'mooncake'"))
    monkeypatch.setattr(remote, "_mooncake_installed", lambda: False)
    monkeypatch.setattr(remote, "_have_ibverbs", lambda: False)
    reason = remote.prepare_mooncake(remote.MOONCAKE_PIN, [])
    assert reason is not None and "--apt-install-ibverbs" in reason and "skipped" in reason
    monkeypatch.setattr(remote, "_have_ibverbs", lambda: True)
    reason = remote.prepare_mooncake(remote.MOONCAKE_PIN, [])
    assert reason is not None and "--pip-install-mooncake" in reason and "skipped" in reason
    assert ran == []


def test_pin_matches_requirements_file() -> None:
    lines = (REPO / "requirements" / "mooncake.txt").read_text().splitlines()
    pins = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    assert remote.MOONCAKE_PIN in pins


def test_remote_importable_without_mooncake() -> None:
    code = (
        "import sys; sys.modules['mooncake'] = None; import hicache_mooncake.tools.bench.remote; print('ok')"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def _mooncake_ready() -> str | None:
    ok, err = remote._mooncake_importable()
    if not ok:
        return f"mooncake.store not importable: {err[-200:]}"
    if shutil.which("unshare") is None:
        return "unshare not found"
    p = subprocess.run(["unshare", "-n", "--", "true"], capture_output=True, text=True)
    if p.returncode != 0:
        return f"unshare -n not permitted here: {p.stderr.strip()}"
    return None


@pytest.mark.integration
def test_mooncake_runner_tiny_real() -> None:
    """Where Mooncake is installed: master + holder + client in a private namespace, data verified,
    the payload really crossed loopback TCP, every process gone afterwards."""
    why = _mooncake_ready()
    if why:
        pytest.skip(why)
    session = remote.MooncakeSession([MiB], 4 * MiB, 2 * MiB, 1, timeout=180)
    try:
        assert session.page(MiB).per_batch == 2
        put_s, get_s = session.repeat(0)
        assert put_s > 0 and get_s > 0
        assert session.lo_bytes >= 0.95 * 2 * 4 * MiB  # the payload crossed loopback TCP
    finally:
        session.close()
    assert session.info["interfaces"] == ["lo"]
    for pid in session.info["pids"].values():
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_runner_batch_mode_needs_private_netns() -> None:
    """Outside a private namespace (this one has more than ``lo``) the runner refuses to start
    the master, whose HTTP server would listen on every interface."""
    from hicache_mooncake.tools.bench import _mooncake_runner as runner

    if runner.interfaces() == ["lo"]:
        pytest.skip("this process already runs in a loopback-only namespace")
    cmd = [sys.executable, "-m", remote.RUNNER_MODULE, "bench", "--sizes", str(MiB)]
    cmd += ["--total", str(MiB), "--batch", str(MiB)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "MOONCAKE_ERROR" in p.stdout and "not in a private network namespace" in p.stdout


def test_socket_baseline_serves_every_page_back_from_its_own_place() -> None:
    """The socket ceiling does the node's job: every page put is kept at its own place and a get
    returns those bytes (a server echoing one reused buffer, or bytes it was never sent, fails the
    harness's check of every page read back), striped over connections like ours."""
    page = 64 << 10
    series = remote.SocketSeries(page, 16 * page, 4 * page, conns=2)
    try:
        put_s, get_s = series.repeat(7)  # all pages put, then all read back and compared
        assert put_s > 0 and get_s > 0
        with pytest.raises(ValueError, match="consecutive"):
            series._batch(series._get_stripe, [0, 2])
    finally:
        series.close()
    assert not series.proc.is_alive()
