"""Where the rdma tests run: on a real device when the kernel has one, else on the verbs simulator.

``/sys/class/infiniband`` with a device (and ``HICACHE_RDMA_SIM`` unset): the real pyverbs and
the first device are used, nothing simulated. Otherwise ``Fabric`` activates the stand-in pyverbs
of ``tests/fake_rdma`` (first on ``sys.path`` here, on ``PYTHONPATH`` for the node processes, the
fabric directory in ``$HICACHE_FAKE_RDMA``); it is never installed anywhere.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

FAKE_ROOT = str(Path(__file__).resolve().parent / "fake_rdma")
FABRIC_ENV = "HICACHE_FAKE_RDMA"
LAYOUT_ENV = "HICACHE_FAKE_PYVERBS_LAYOUT"


def real_device() -> str | None:
    """The first kernel RDMA device, unless the simulator is forced (``HICACHE_RDMA_SIM=1``)."""
    if os.environ.get("HICACHE_RDMA_SIM") == "1":
        return None
    try:
        names = sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        return None
    return names[0] if names else None


def _switch_pyverbs(fake: bool) -> None:
    """Make ``import pyverbs`` give the stand-in (``fake``) or the host's real one. Modules of the
    other one are forgotten (no engine built on them may still be open)."""
    if fake and FAKE_ROOT not in sys.path:
        sys.path.insert(0, FAKE_ROOT)
    if not fake:
        while FAKE_ROOT in sys.path:
            sys.path.remove(FAKE_ROOT)
    mod = sys.modules.get("pyverbs")
    if mod is not None and str(getattr(mod, "__file__", "")).startswith(FAKE_ROOT) != fake:
        for name in [n for n in sys.modules if n == "pyverbs" or n.startswith("pyverbs.")]:
            del sys.modules[name]
    from hicache_mooncake.transport.rdma import verbs as rdma_verbs

    rdma_verbs.reset_for_tests()


def _use_fake_pyverbs() -> None:
    _switch_pyverbs(fake=True)


def use_real_pyverbs() -> None:
    """For runs on a real device (``real_device()``): the host's pyverbs, not the stand-in."""
    _switch_pyverbs(fake=False)


class Fabric:
    """A simulated RDMA network in ``path`` (its ``fabric.json``: devices, limits, routing)."""

    def __init__(self, path: Path, config: dict[str, Any] | None = None) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        (path / "fabric.json").write_text(json.dumps(config or {"devices": [{"name": "sim0"}]}))
        devices = (config or {}).get("devices", [{"name": "sim0"}])
        self.device = devices[0]["name"] if devices else ""
        self._saved: str | None = None

    def env(self) -> dict[str, str]:
        """Environment for a process that should see this fabric through the fake pyverbs."""
        path = os.environ.get("PYTHONPATH", "")
        return {
            FABRIC_ENV: str(self.path),
            "PYTHONPATH": FAKE_ROOT + (os.pathsep + path if path else ""),
        }

    def __enter__(self) -> Fabric:
        _use_fake_pyverbs()
        self._saved = os.environ.get(FABRIC_ENV)
        os.environ[FABRIC_ENV] = str(self.path)
        self.faults.reset()
        return self

    def __exit__(self, *exc: object) -> None:
        self.faults.reset()
        if self._saved is None:
            os.environ.pop(FABRIC_ENV, None)
        else:
            os.environ[FABRIC_ENV] = self._saved

    @property
    def faults(self) -> Any:
        """``pyverbs._fabric.FAULTS``: this process's injected completion errors, QP errors, delays."""
        _use_fake_pyverbs()
        from pyverbs import _fabric  # type: ignore[import-not-found]

        return _fabric.FAULTS


def no_fabric() -> Any:
    """Context in which this process sees no RDMA at all (the fake pyverbs, no fabric)."""
    import contextlib

    @contextlib.contextmanager
    def ctx() -> Any:
        _use_fake_pyverbs()
        saved = os.environ.pop(FABRIC_ENV, None)
        try:
            yield
        finally:
            if saved is not None:
                os.environ[FABRIC_ENV] = saved

    return ctx()
