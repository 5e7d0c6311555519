"""Fixtures of the e2e tier: the tiny model, a preset's YAML rewritten for one test's own paths and
ports, and real SGLang servers started through ``hicache-mooncake launch`` (one at a time).

Every server started here is stopped by the fixture that started it (its process group, see
``server.Server.stop``); the start-up times are printed in pytest's summary (``-ra`` shows them with
``-s``; they are also in ``E2E_TIMINGS``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from e2e_launch import E2E_TIMINGS, TORCH_EXTENSIONS  # noqa: E402
from e2e_model import make_llama  # noqa: E402


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if E2E_TIMINGS:
        terminalreporter.write_line(
            "e2e timings: " + ", ".join(f"{name} {secs:.1f}s" for name, secs in E2E_TIMINGS.items())
        )


@pytest.fixture(scope="session")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def tiny_llama(e2e_dir: Path) -> Path:
    return make_llama(e2e_dir / "tiny-llama")


@pytest.fixture(scope="session", autouse=True)
def _inductor_cache_of_the_session(e2e_dir: Path) -> Iterator[None]:
    """Building the tiny model imports parts of torch that make their cache folder, by default
    ``/tmp/torchinductor_<user>``, which would outlive the tests: it goes under the session's
    temporary directory instead (the servers keep theirs in their own ``TMPDIR``)."""
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(e2e_dir / "torchinductor")
    yield
    if old is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def _torch_extensions_for_tests() -> Iterator[None]:
    """The test process computes SGLang page hashes too (the native hash extension)."""
    old = os.environ.get("TORCH_EXTENSIONS_DIR")
    TORCH_EXTENSIONS.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(TORCH_EXTENSIONS)
    yield
    if old is None:
        os.environ.pop("TORCH_EXTENSIONS_DIR", None)
    else:
        os.environ["TORCH_EXTENSIONS_DIR"] = old
