"""The key-audit tests reuse the SGLang test builders (tests/sglang/sglang_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

_SGLANG_TESTS = str(Path(__file__).resolve().parent.parent / "sglang")
if _SGLANG_TESTS not in sys.path:
    sys.path.append(_SGLANG_TESTS)
