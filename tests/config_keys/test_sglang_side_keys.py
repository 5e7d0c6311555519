"""Keys read by SGLang (its dynamic loader, its extra-config parser, ``hicache-mooncake launch``) or
by the backend SGLang calls: each set to two values, through SGLang's own code."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake.config import load_config_file
from hicache_mooncake.config.sglang_section import flag_of
from hicache_mooncake.launch_command import our_flags, sglang_parser
from hicache_mooncake.tools.sglang_harness import fill_random_pages, make_host_pool, make_storage_config

pytestmark = pytest.mark.sglang
PS = SMALL.page_size


def keys(n: int, tag: str = "k") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


def test_the_dynamic_loader_keys_choose_what_sglang_builds(caplog: pytest.LogCaptureFixture) -> None:
    """``module_path`` + ``class_name`` are what SGLang imports and constructs, ``backend_name`` is
    the label of its log lines; anything else named there is what SGLang tries to build."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.backend import HiCacheMooncakeBackend

    host = make_host_pool("page_first", False, SMALL)
    extra = small_extra()
    extra["backend_name"] = "label-for-logs"
    with caplog.at_level(logging.INFO):
        ours = StorageBackendFactory.create_backend("dynamic", make_storage_config(extra), host)
    try:
        assert isinstance(ours, HiCacheMooncakeBackend)
        assert "'label-for-logs' (hicache_mooncake.backend.HiCacheMooncakeBackend)" in caplog.text
    finally:
        ours.close()
    for bad, needle in (
        ({"module_path": "no.such.module"}, "no.such.module"),
        ({"class_name": "Nope"}, "Nope"),
        ({"class_name": "KeySpace"}, "must inherit from HiCacheStorage"),  # a class, not a backend
    ):
        with pytest.raises(Exception, match=needle):
            StorageBackendFactory.create_backend(
                "dynamic", make_storage_config({**small_extra(), **bad}), host
            )


@pytest.mark.parametrize(
    "given",
    [{}, {"prefetch_threshold": 64, "prefetch_timeout_base": 3, "prefetch_timeout_per_ki_token": 0.5}],
)
def test_sglang_consumes_its_own_keys_from_the_extra_config(given: dict[str, Any]) -> None:
    """``prefetch_threshold`` / ``prefetch_timeout_base`` / ``prefetch_timeout_per_ki_token`` are
    SGLang's: its parser takes them out of our extra config and uses them (defaults 256, 1, 0.25)."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    extra, threshold, base, per_ki, _prefix = HybridCacheController.parse_storage_backend_extra_config(
        json.dumps({**small_extra(), **given})
    )
    want = (given.get("prefetch_threshold", 256), given.get("prefetch_timeout_base", 1))
    assert (threshold, base) == want
    assert per_ki == given.get("prefetch_timeout_per_ki_token", 0.25)
    assert not set(given) & set(extra)  # consumed: the backend never sees them


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hicache_write_policy", "write_through_selective"),
        ("hicache_storage_prefetch_policy", "best_effort"),
        ("hicache_storage_prefetch_retry_poll_interval", 3),
        ("hicache_storage_prefetch_retry_max_attempts", 5),
    ],
)
def test_every_sglang_key_becomes_its_launch_flag(tmp_path: Path, key: str, value: Any) -> None:
    """``hicache-mooncake launch`` passes each ``sglang:`` key as SGLang's flag; unset, SGLang's
    default stays."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"tiers": {"dram": {"capacity": "64MiB"}}, "sglang": {key: value}}))
    flags = our_flags(load_config_file(path))
    assert flag_of(key) in flags
    parser = sglang_parser()
    parsed = parser.parse_args([*flags, "--model-path", "-"])
    default = parser.parse_args(["--model-path", "-"])
    assert getattr(parsed, key) == value != getattr(default, key)


@pytest.mark.parametrize("max_batch_pages", [4, 128])
def test_max_batch_pages_bounds_a_v1_call(max_batch_pages: int) -> None:
    extra = small_extra()
    extra["io"] = {"max_batch_pages": max_batch_pages}
    backend, host = make_backend(extra=extra)
    try:
        idx = host.alloc(6 * PS)
        fill_random_pages(host, idx, seed=1)
        stored = backend.batch_set_v1(keys(6), idx)
        assert stored == [max_batch_pages >= 6] * 6
    finally:
        backend.close()


@pytest.mark.parametrize("timeout_s", [7.0, 300.0])
def test_operation_timeout_s_is_the_admin_default_deadline(timeout_s: float, tmp_path: Path) -> None:
    extra = small_extra()
    extra["admin"] = {"port": 0, "discovery_dir": str(tmp_path), "operation_timeout_s": timeout_s}
    backend, _host = make_backend(extra=extra)
    try:
        assert backend.admin.context.timeout_s == timeout_s
    finally:
        backend.close()


def test_tp_lcm_size_stores_mha_pages_by_head_groups() -> None:
    """SGLang's ``tp_lcm_size`` (heads split across TP sizes): MHA pages become head-group objects
    that every TP size dividing it shares (tests/sglang/test_cross_tp.py proves the bytes); a rank
    holds its share of the groups."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    host = make_host_pool("page_head", False, SMALL)
    for lcm, groups in ((None, ()), (4, ("@hg2of4", "@hg3of4"))):
        cfg = make_storage_config(small_extra(), tp_rank=1, tp_size=2, layout="page_head", tp_lcm_size=lcm)
        backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
        try:
            assert backend.ranks.head_groups == (lcm or 0)
            assert backend._kv_cut().groups == groups
        finally:
            backend.close()
