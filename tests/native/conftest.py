"""Fixtures of the native tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hicache_mooncake import native


@pytest.fixture(autouse=True)
def _fingerprint_mask_off() -> Iterator[None]:
    """The test-only fingerprint mask is process-global: every test starts and ends with it off."""
    native.set_test_fingerprint_mask(0)
    yield
    native.set_test_fingerprint_mask(0)
