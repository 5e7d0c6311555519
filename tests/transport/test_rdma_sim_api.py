"""The stand-in pyverbs keeps the real pyverbs' API: the names the transport uses exist in both,
every documented parameter is in the stand-in's signature in the same order, objects built the
way the transport builds them read back the same, and the enums have the same values and home.

The real one is Debian's python3-pyverbs (rdma-core 44) under the system Python, which
``scripts/dev.sh`` installs; ``HICACHE_PYVERBS_BUILD=<rdma-core build dir>`` compares a locally
built rdma-core too (its ``python/`` and ``lib/``). Importing pyverbs needs no RDMA device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rdma_sim import FAKE_ROOT, LAYOUT_ENV

PROBE = str(Path(FAKE_ROOT) / "api_probe.py")
SYSTEM_PYTHON = "/usr/bin/python3"
# pyverbs documents AHAttr's GlobalRoute parameter as "grh"; its signature (and our code) say "gr"
DOC_ERRATA = {"addr.AHAttr.__init__": {"grh": "gr"}}


def _run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    report: dict[str, Any] = json.loads(p.stdout)
    return report


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", LAYOUT_ENV)}
    return dict(env, **extra)


def _real_reports() -> list[dict[str, Any]]:
    reports = []
    if os.path.exists(SYSTEM_PYTHON):
        check = subprocess.run([SYSTEM_PYTHON, "-P", "-c", "import pyverbs.device"], capture_output=True)
        if check.returncode == 0:
            reports.append(_run([SYSTEM_PYTHON, "-P", PROBE], _clean_env()))
    build = os.environ.get("HICACHE_PYVERBS_BUILD")
    if build:
        env = _clean_env(PYTHONPATH=f"{build}/python", LD_LIBRARY_PATH=f"{build}/lib")
        reports.append(_run([SYSTEM_PYTHON, "-P", PROBE], env))
    if not reports:
        pytest.skip("no real pyverbs here (apt-get install python3-pyverbs; scripts/dev.sh does it as root)")
    return reports


def _fake_report(layout: str) -> dict[str, Any]:
    return _run([sys.executable, "-P", PROBE], _clean_env(PYTHONPATH=FAKE_ROOT, **{LAYOUT_ENV: layout}))


def test_fake_pyverbs_keeps_the_real_api() -> None:
    for real in _real_reports():
        layout = "44" if real["enums_module"] == "pyverbs.enums" else "59"
        fake = _fake_report(layout)
        where = real["pyverbs"]
        assert fake["pyverbs"].startswith(FAKE_ROOT)
        assert [n for n, ok in real["names"].items() if not ok] == [], where  # what we use exists
        assert [n for n, ok in fake["names"].items() if not ok] == []
        for name, doc in ((n, p["doc"]) for n, p in real["params"].items()):
            want = [DOC_ERRATA.get(name, {}).get(d, d) for d in doc]
            got = fake["params"][name]
            if want and want[-1] == "kwargs":
                assert got["var_kw"], name
                want = want[:-1]
            assert got["sig"][: len(want)] == want, (name, where)
        assert fake["constructions"] == real["constructions"], where
        assert (fake["enums_module"], fake["enums"]) == (real["enums_module"], real["enums"]), where


@pytest.mark.parametrize(
    ("layout", "module"),
    [
        ("44", "pyverbs.enums"),
        ("50", "pyverbs.enums"),
        ("59", "pyverbs.libibverbs_enums"),
        ("current", "pyverbs.libibverbs_enums"),
    ],
)
def test_fake_layouts_follow_rdma_core_releases(layout: str, module: str) -> None:
    report = _fake_report(layout)
    assert report["enums_module"] == module
    assert report["enums"]["IBV_ACCESS_REMOTE_READ"] == 4 and report["enums"]["IBV_QPS_ERR"] == 6
