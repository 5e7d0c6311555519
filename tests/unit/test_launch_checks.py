"""The checks ``launch`` and ``config validate`` run on a YAML's ``sglang:`` section with our tiers, on
a host of known size, and the ``config validate|show`` commands with the backend loader's wording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hicache_mooncake.checks.launch import HostMemory, check
from hicache_mooncake.cli import main
from hicache_mooncake.config import load_backend_config, load_config_file
from hicache_mooncake.presets import preset_names, preset_path

GiB = 1 << 30
HOST = HostMemory(limit=256 * GiB, available=240 * GiB)


def findings(
    sglang: dict[str, Any], ranks: int = 1, dram: str = "4GiB", memory: HostMemory = HOST, **top: Any
):
    config = load_backend_config({"tiers": {"dram": {"capacity": dram}}, "sglang": sglang, **top}, environ={})
    return [(f.level, f.message) for f in check(config, ranks, memory)]


def errors(**kw: Any) -> list[str]:
    sglang = kw.pop("sglang", {"page_size": 64})
    return [m for level, m in findings(sglang, **kw) if level == "error"]


@pytest.mark.parametrize("preset", preset_names())
def test_presets_pass_on_a_big_host_with_eight_ranks(preset):
    config = load_config_file(preset_path(preset)).config
    assert [f for f in check(config, 8, HOST) if f.level == "error"] == []


def test_a_layout_the_zero_copy_path_is_not_tested_with_is_refused_unless_copying():
    [message] = errors(sglang={"page_size": 64, "hicache_mem_layout": "page_first_kv_split"})
    assert (
        message.startswith("sglang.hicache_mem_layout: page_first_kv_split") and "interface_v1: 0" in message
    )
    assert errors(sglang={"page_size": 64, "hicache_mem_layout": "page_first_kv_split"}, interface_v1=0) == []


def test_layouts_sglang_would_rewrite_are_named():
    found = findings({"page_size": 64, "hicache_mem_layout": "page_first_direct"})
    assert ("warning", next(m for _, m in found if "hicache_io_backend: direct" in m)) in found
    found = findings({"page_size": 64, "hicache_io_backend": "direct"})
    assert any("hicache_mem_layout: page_first_direct" in m for _, m in found)


def test_a_host_pool_no_larger_than_the_gpu_pool_is_refused():
    [message] = errors(sglang={"page_size": 64, "hicache_ratio": 1.0})
    assert "sglang.hicache_ratio: 1.0" in message and "more than 1" in message
    assert (
        errors(sglang={"page_size": 64, "hicache_ratio": 1.0, "hicache_host_memory_mode": "buffer_only"})
        == []
    )


def test_dram_tiers_of_every_rank_must_fit_in_the_host():
    [message] = errors(dram="40GiB", ranks=8)
    assert "40.0GiB x 8 ranks = 320.0GiB" in message and "at most 32.0GiB per rank" in message
    assert errors(dram="40GiB", ranks=4) == []


def test_the_host_cache_arena_is_counted_once_per_host():
    """With ``tiers.host_cache: on`` every rank of the host uses the service's one arena: 40 GiB
    for 8 ranks is 40 GiB, not 320; past the host it is refused without the per-rank wording."""

    def host_cache_errors(dram: str) -> list[str]:
        config = load_backend_config(
            {"tiers": {"dram": {"capacity": dram}, "host_cache": "on"}, "sglang": {"page_size": 64}},
            environ={},
        )
        return [f.message for f in check(config, 8, HOST) if f.level == "error"]

    assert host_cache_errors("40GiB") == []
    [message] = host_cache_errors("300GiB")
    assert "= 300.0GiB" in message and "x 8 ranks" not in message and "one arena for the host" in message


def test_a_fixed_host_pool_is_split_exactly_with_the_dram_tiers():
    ok = {"page_size": 64, "hicache_size": "20GB"}
    assert errors(sglang=ok, dram="8GiB", ranks=8) == []  # 8 x (20GB + 8GiB) + 10GiB < 256GiB
    [message] = errors(sglang=ok, dram="16GiB", ranks=8)
    assert message.startswith("tiers.dram.capacity: 16.0GiB x 8 ranks beside SGLang's host pools")
    lowered = message.split("at most ")[1].split(" per rank")[0]
    assert errors(sglang=ok, dram=lowered, ranks=8) == []  # the figure it suggests is enough


def test_a_host_pool_sglang_itself_would_refuse_is_refused():
    small = HostMemory(limit=64 * GiB, available=30 * GiB)
    messages = errors(sglang={"page_size": 64, "hicache_size": "10GB"}, dram="1GiB", ranks=4, memory=small)
    assert any(
        m.startswith("sglang.hicache_size: 10GB per rank") and "SGLang would refuse" in m for m in messages
    )


def test_without_a_size_the_split_is_warned_about_or_noted():
    tight = HostMemory(limit=64 * GiB, available=60 * GiB)  # SGLang's pools: up to 0.8 x (60 - 10) GiB
    found = findings({"page_size": 64}, ranks=4, dram="8GiB", memory=tight)
    assert any(
        level == "warning" and "up to 40.0GiB" in m and "sglang.hicache_size" in m for level, m in found
    )
    assert not any(level == "warning" for level, _ in findings({"page_size": 64}, 4, "4GiB", tight))
    found = findings({"page_size": 64, "hicache_ratio": 2.0}, ranks=4, dram="4GiB", memory=tight)
    assert any(level == "note" and "unknown before it starts" in m for level, m in found)


def test_small_or_unset_pages_are_pointed_out():
    assert any("32-128" in m for level, m in findings({"page_size": 1}) if level == "warning")
    assert any("sglang.page_size is not set" in m for level, m in findings({}) if level == "note")


def test_the_section_refuses_what_sglang_would_misread(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"sglang": {"hicache_size": "16GiB", "page_size": 0, "mem_layout": "x"}}))
    assert main(["config", "validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "sglang.hicache_size: SGLang's --hicache-size takes whole GB" in err
    assert "sglang.page_size: Input should be greater than or equal to 1" in err
    assert "sglang.mem_layout: unknown key" in err


def test_validate_words_errors_as_the_backend_does(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tiers:\n  dram:\n    capacity: lots\n")
    with pytest.raises(Exception) as backend_error:
        load_config_file(bad)
    good = preset_path("default")
    assert main(["config", "validate", str(good), str(bad)]) == 1
    out = capsys.readouterr()
    assert f"{good}: ok" in out.out
    assert f"{bad}: error: {backend_error.value}" in out.err


def test_validate_counts_ranks(tmp_path: Path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"tiers": {"dram": {"capacity": "64GiB"}}, "sglang": {"page_size": 64}}))
    assert main(["config", "validate", str(cfg), "--ranks", "4096"]) == 1
    assert "x 4096 ranks" in capsys.readouterr().err


def test_show_prints_the_effective_configuration(capsys):
    path = preset_path("default")
    assert main(["config", "show", str(path)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    config = load_config_file(path).config
    assert load_backend_config(shown, environ={}) == config
    assert shown["io"]["timeout_s"] == config.io.timeout_s and shown["metrics"]["port"] == 0
    assert main(["config", "show", "--json", str(path)]) == 0
    assert load_backend_config(json.loads(capsys.readouterr().out), environ={}) == config  # JSON: bytes


def test_the_readme_sizing_example_fits_and_its_limit_is_right():
    """README "Sizing": 8 ranks, 2 TiB, 100GB host pool per rank, 150GiB DRAM tier per rank."""
    host = HostMemory(limit=2048 * GiB, available=2000 * GiB)
    sized = {"page_size": 64, "hicache_size": "100GB"}
    assert errors(sglang=sized, dram="150GiB", ranks=8, memory=host) == []
    [message] = errors(sglang=sized, dram="170GiB", ranks=8, memory=host)
    assert "at most 161.6GiB per rank" in message
