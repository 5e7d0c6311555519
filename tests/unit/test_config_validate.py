"""``config validate`` is the strongest check there is: a file it says ``ok`` to is one SGLang parses,
our backend loads (``$HICACHE_MOONCAKE_CONFIG`` honoured as the backend honours it) and this host can
serve (SSD directories, free space, shared memory, ports). ``config show`` prints what the backend
runs, sizes with units. Every file is real, every port a real socket."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from hicache_mooncake.cli import main
from hicache_mooncake.config import CONFIG_ENV, load_config_file
from hicache_mooncake.config.sglang_parse import (
    _equivalent_parse,
    _load_function,
    _sglang_source,
    sglang_refusals,
)
from hicache_mooncake.presets import preset_path

GiB = 1 << 30
LOADER = {
    "backend_name": "hicache-mooncake",
    "module_path": "hicache_mooncake.backend",
    "class_name": "HiCacheMooncakeBackend",
}
SMALL_TIERS = {"dram": {"capacity": "64MiB", "slab_size": "1MiB", "prefault": False}}


def write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["config", "validate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def ssd(tmp_path: Path, path: str, capacity: str = "64MiB", **more: Any) -> dict[str, Any]:
    tier = {"enabled": True, "path": path, "capacity": capacity, "region_size": "1MiB", "min_free": 0, **more}
    return {**LOADER, "tiers": {**SMALL_TIERS, "ssd": tier}, "sglang": {"page_size": 64}}


# ---------------------------------------------------------------- item 2: files SGLang refuses


def test_an_empty_file_is_refused_with_sglangs_own_error(tmp_path, capsys):
    """Before: exit 0 and "ok" (our loader fills every default); SGLang then fails with
    'NoneType' object has no attribute 'pop'."""
    empty = write(tmp_path / "empty.yaml", "")
    code, out, err = validate(capsys, str(empty))
    assert code == 1 and f"{empty}: ok" not in out
    assert "'NoneType' object has no attribute 'pop'" in err and "the file is empty" in err
    assert "SGLang's own HybridCacheController.parse_storage_backend_extra_config" in out  # whose code ran


@pytest.mark.parametrize("missing", ["backend_name", "module_path", "class_name"])
def test_a_file_without_a_loader_key_is_refused_naming_it(tmp_path, capsys, missing):
    data = {k: v for k, v in LOADER.items() if k != missing} | {"sglang": {"page_size": 64}}
    cfg = write(tmp_path / "c.yaml", data)
    code, out, err = validate(capsys, str(cfg))
    assert code == 1 and f"Missing required field '{missing}'" in err and f"{missing}: missing" in err
    assert [k for k in LOADER if k != missing and f"'{k}'" in err] == []  # only the missing key is named


def test_a_module_sglang_cannot_import_is_refused(tmp_path, capsys):
    cfg = write(tmp_path / "c.yaml", {**LOADER, "module_path": "hicache_mooncake.no_such_backend"})
    code, _out, err = validate(capsys, str(cfg))
    assert code == 1 and "module_path: 'hicache_mooncake.no_such_backend' is not importable" in err


def test_every_preset_passes(capsys):
    for name in ("default", "cluster", "mooncake"):
        code, out, err = validate(capsys, str(preset_path(name)))
        assert code == 0 and f"{preset_path(name)}: ok" in out, err


def test_our_copy_of_sglangs_rules_agrees_with_sglangs_own_parser(tmp_path):
    """Where SGLang is not installed our copy runs: it refuses and accepts what SGLang does."""
    source = _sglang_source()
    assert source is not None  # SGLang is a dependency of this repository's tests
    sglang_parse = _load_function(
        source / "srt/mem_cache/hybrid_cache/hybrid_cache_controller.py",
        "parse_storage_backend_extra_config",
        "HybridCacheController",
    )
    assert sglang_parse is not None
    cases = {
        "empty.yaml": "",
        "good.yaml": yaml.safe_dump({**LOADER, "prefetch_threshold": 128, "tiers": SMALL_TIERS}),
        "bad_threshold.yaml": yaml.safe_dump({**LOADER, "prefetch_threshold": "many"}),
        "bad_prefix.yaml": yaml.safe_dump({**LOADER, "hicache_storage_pass_prefix_keys": "yes"}),
        "good.json": '{"backend_name": "x", "module_path": "y", "class_name": "z"}',
        "bad.toml2": "a = 1",
    }
    for name, text in cases.items():
        spec = f"@{write(tmp_path / name, text)}"
        results = []
        for parse in (sglang_parse, _equivalent_parse):
            try:
                results.append(("ok", parse(spec)))
            except Exception as exc:
                results.append((type(exc).__name__, str(exc)))
        assert results[0] == results[1], name


# ---------------------------------------------------------------- item 3: this host


def test_an_ssd_path_under_proc_is_refused(tmp_path, capsys):
    """Before: "ok" for tiers.ssd.path: /proc/nope (nothing can be created there)."""
    cfg = write(tmp_path / "c.yaml", ssd(tmp_path, "/proc/nope"))
    code, _out, err = validate(capsys, str(cfg))
    assert code == 1 and "tiers.ssd.path: '/proc/nope' does not exist and cannot be created" in err


def test_a_relative_ssd_path_is_refused(tmp_path, capsys):
    cfg = write(tmp_path / "c.yaml", ssd(tmp_path, "cache/ssd"))
    code, _out, err = validate(capsys, str(cfg))
    assert code == 1 and "tiers.ssd.path: 'cache/ssd' is relative" in err


def test_a_creatable_ssd_path_passes_and_nothing_is_left_behind(tmp_path, capsys):
    target = tmp_path / "new" / "ssd"
    cfg = write(tmp_path / "c.yaml", ssd(tmp_path, str(target)))
    code, out, err = validate(capsys, str(cfg))
    assert code == 0 and f"{cfg}: ok" in out, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]  # the probe directory was removed


def test_an_ssd_larger_than_the_free_disk_for_all_ranks_is_refused(tmp_path, capsys):
    """Before: 500 GiB x 8 ranks on a disk with 73 GB free was "ok". Here: each rank's capacity is
    an eighth of the free space (fits one rank), and 8 ranks plus min_free do not fit."""
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    per_rank = f"{(free // 4) >> 20}MiB"  # 8 ranks: twice the free space
    cfg = write(tmp_path / "c.yaml", ssd(tmp_path, str(tmp_path / "ssd"), capacity=per_rank))
    code, out, _err = validate(capsys, str(cfg))
    assert code == 0, "one rank fits"
    code, _out, err = validate(capsys, str(cfg), "--ranks", "8")
    assert code == 1 and "tiers.ssd.capacity:" in err and "x 8 ranks" in err and "does not fit" in err


def test_a_host_cache_arena_larger_than_its_shared_memory_is_refused(tmp_path, capsys):
    shm = tmp_path / "shm"
    shm.mkdir()
    st = os.statvfs(shm)
    too_big = f"{(st.f_bavail * st.f_frsize >> 30) + 2}GiB"
    data = {
        **LOADER,
        "tiers": {"host_cache": "on", "dram": {"capacity": too_big, "prefault": False}},
        "host_cache": {"shm_dir": str(shm)},
        "sglang": {"page_size": 64},
    }
    code, _out, err = validate(capsys, str(write(tmp_path / "c.yaml", data)))
    assert code == 1 and f"does not fit in host_cache.shm_dir {shm}" in err


def test_a_port_in_use_is_pointed_out(tmp_path, capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        data = {**LOADER, "tiers": SMALL_TIERS, "metrics": {"port": port}, "sglang": {"page_size": 64}}
        code, out, _err = validate(capsys, str(write(tmp_path / "c.yaml", data)))
    assert code == 0 and f"warning: metrics.port: port {port} on 127.0.0.1 is in use now" in out


# ---------------------------------------------------------------- item 7: $HICACHE_MOONCAKE_CONFIG


def test_validate_checks_the_file_the_environment_makes_the_backend_read(tmp_path, capsys, monkeypatch):
    """Before: validate said "ok" to the launched file while the backend would load another one."""
    good = write(tmp_path / "good.yaml", {**LOADER, "tiers": SMALL_TIERS, "sglang": {"page_size": 64}})
    other = write(tmp_path / "other.yaml", {"tiers": {"dram": {"capacityy": "1GiB"}}})
    monkeypatch.setenv(CONFIG_ENV, str(other))
    code, out, err = validate(capsys, str(good))
    assert code == 1 and f"${CONFIG_ENV}={other} is set" in out and "tiers.dram.capacityy: unknown key" in err
    code, out, err = validate(capsys)  # no FILE: the file the variable names
    assert code == 1 and "tiers.dram.capacityy: unknown key" in err


def test_show_prints_what_the_environment_makes_the_backend_run(tmp_path, capsys, monkeypatch):
    good = write(tmp_path / "good.yaml", {**LOADER, "tiers": SMALL_TIERS})
    other = write(tmp_path / "other.yaml", {"tiers": {"dram": {"capacity": "3GiB"}}})
    monkeypatch.setenv(CONFIG_ENV, str(other))
    assert main(["config", "show", str(good)]) == 0
    out = capsys.readouterr()
    assert "capacity: 3GiB  # 3221225472 B" in out.out and f"${CONFIG_ENV}={other} is set" in out.err


# ---------------------------------------------------------------- item 8: units and words


def test_show_prints_sizes_with_units_that_load_back(tmp_path, capsys):
    """Before: capacity: 2147483648."""
    cfg = write(tmp_path / "c.yaml", {**LOADER, "tiers": {"dram": {"capacity": "2GiB", "slab_size": "1MiB"}}})
    assert main(["config", "show", str(cfg)]) == 0
    shown = capsys.readouterr().out
    assert "    capacity: 2GiB  # 2147483648 B\n" in shown and "slab_size: 1MiB  # 1048576 B" in shown
    reloaded = write(tmp_path / "shown.yaml", shown)
    assert load_config_file(reloaded).config == load_config_file(cfg).config


@pytest.mark.parametrize("spelling", ["2G", "2g", "512M", "4K", "1T"])
def test_a_bare_unit_letter_is_refused_naming_both_spellings(tmp_path, capsys, spelling):
    """Before: 2G meant 2 GiB while 2GB means 10^9 bytes (SGLang's GB)."""
    number, letter = spelling[:-1], spelling[-1].upper()
    cfg = write(tmp_path / "c.yaml", {**LOADER, "tiers": {"dram": {"capacity": spelling}}})
    code, _out, err = validate(capsys, str(cfg))
    assert code == 1 and "tiers.dram.capacity" in err
    assert f"write {number}{letter}iB" in err and f"or {number}{letter}B" in err


def test_gb_is_decimal_and_gib_binary_as_sglang_reads_them(tmp_path):
    cfg = write(tmp_path / "c.yaml", {"tiers": {"dram": {"capacity": "2GB"}, "ssd": {"capacity": "2GiB"}}})
    tiers = load_config_file(cfg).config.tiers
    assert tiers.dram.capacity == 2 * 10**9 and tiers.ssd.capacity == 2 * GiB


@pytest.mark.parametrize(
    ("written", "mode"), [("off", "off"), ("on", "on"), ("'off'", "off"), ("auto", "auto")]
)
def test_host_cache_off_unquoted_is_off(tmp_path, written, mode):
    """Issue 45: YAML reads an unquoted off as false, which was refused ("got False")."""
    cfg = write(tmp_path / "c.yaml", f"tiers:\n  host_cache: {written}\n")
    assert load_config_file(cfg).config.tiers.host_cache == mode


def test_sglang_refusals_never_raises_on_an_unreadable_file(tmp_path):
    findings = sglang_refusals(tmp_path / "absent.yaml")
    assert [f.level for f in findings] == ["note", "error"] and "No such file" in findings[1].message
