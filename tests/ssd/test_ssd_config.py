"""SSD keys that cannot work are refused with their key path, before anything is made; one that
asks for more than the disk has is accepted with one warning line saying what will happen."""

from __future__ import annotations

import logging
import os

import pytest

from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.store_builder import build_store


def _cfg(path: str, **ssd: object):  # type: ignore[no-untyped-def]
    return validate_config(
        {
            "tiers": {
                "dram": {"enabled": False},
                "ssd": {
                    "enabled": True,
                    "path": path,
                    "capacity": "4MiB",
                    "region_size": "1MiB",
                    "min_free": 0,
                    **ssd,
                },
            }
        }
    )


@pytest.mark.parametrize("size", [0, "1000", "32KiB"])
def test_a_region_size_that_cannot_work_is_refused_with_its_key(tmp_path, size: object) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"tiers\.ssd\.region_size"):
        _cfg(str(tmp_path), region_size=size)


def test_a_duplicate_path_list_is_refused_with_its_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"tiers\.ssd\.path.*twice"):
        _cfg([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a") + "/"])  # type: ignore[arg-type]


def test_min_free_larger_than_the_disk_is_refused_before_anything_is_made(small_tmpfs: str) -> None:
    base = os.path.join(small_tmpfs, "cache")
    cfg = _cfg(base, min_free="1GiB")
    with pytest.raises(ValueError, match=r"tiers\.ssd\.min_free: .*every SSD set would be refused"):
        build_store(cfg, "rank0")
    assert not os.path.exists(base)


def test_a_capacity_far_beyond_the_disk_is_accepted_with_one_warning(
    small_tmpfs: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _cfg(os.path.join(small_tmpfs, "cache"), capacity="16TiB")
    with caplog.at_level(logging.WARNING):
        store = build_store(cfg, "rank0")
    tier = store.ssd
    assert tier is not None
    try:
        lines = [r.message for r in caplog.records if "tiers.ssd.capacity" in r.message]
        assert len(lines) == 1 and "16" in lines[0]
        st = tier.stats()
        assert st["capacity_bytes"] <= 8 << 20 and st["regions"] <= 8
    finally:
        store.close()
