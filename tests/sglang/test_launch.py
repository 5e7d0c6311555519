"""``hicache-mooncake launch``: the command line it builds for each shipped preset is the one SGLang's
own parser reads back with the YAML's values (so a flag SGLang renames fails here), operator
arguments that contradict the YAML and bad combinations are refused before SGLang starts, and a real
launch replaces our process with SGLang's ``launch_server``."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from hicache_mooncake.cli import main
from hicache_mooncake.config import load_backend_config
from hicache_mooncake.config.sglang_section import GB, SglangSection, flag_of
from hicache_mooncake.presets import preset_names, preset_path

pytestmark = pytest.mark.sglang
CPU = ["--model-path", "dummy", "--device", "cpu"]


def sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    return parser


def dry_run(capsys: pytest.CaptureFixture[str], config: Path | str, *rest: str) -> tuple[int, list[str], str]:
    code = main(["launch", "--dry-run", str(config), "--", *rest])
    out = capsys.readouterr()
    return code, shlex.split(out.out.strip()) if out.out.strip() else [], out.err


def test_every_sglang_key_is_a_flag_of_sglangs_parser():
    actions = {a.dest: a for a in sglang_parser()._actions}
    for name, field in SglangSection.model_fields.items():
        action = actions.get(name)
        assert action is not None and flag_of(name) in action.option_strings, (
            f"sglang.{name}: no {flag_of(name)}"
        )
        literal = next(
            (a for a in typing.get_args(field.annotation) if typing.get_origin(a) is typing.Literal), None
        )
        if literal is not None:
            assert set(typing.get_args(literal)) == set(action.choices or ()), (
                f"sglang.{name}: choices differ"
            )


@pytest.mark.parametrize("preset", preset_names())
def test_dry_run_of_each_preset_is_what_sglang_parses(preset, capsys):
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
    from sglang.srt.server_args import ServerArgs

    path = preset_path(preset)
    code, argv, _err = dry_run(capsys, path, *CPU)
    assert code == 0
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    server_args = ServerArgs.from_cli_args(sglang_parser().parse_args(argv[3:]))
    assert server_args.enable_hierarchical_cache and server_args.hicache_storage_backend == "dynamic"
    assert server_args.hicache_storage_backend_extra_config == f"@{path.resolve()}"
    section = yaml.safe_load(path.read_text()).get("sglang")
    assert section, f"preset {preset} has no sglang: section"
    for key, value in SglangSection.model_validate(section).model_dump(exclude_none=True).items():
        want = value // GB if key == "hicache_size" else value
        assert getattr(server_args, key) == want, key
    # what SGLang hands the backend from that extra config is a valid configuration of ours
    extra, *_ = HybridCacheController.parse_storage_backend_extra_config(
        server_args.hicache_storage_backend_extra_config
    )
    assert (
        extra["module_path"] == "hicache_mooncake.backend" and extra["class_name"] == "HiCacheMooncakeBackend"
    )
    load_backend_config(extra, environ={})


def write(tmp_path: Path, sglang: dict[str, Any], **top: Any) -> Path:
    path = tmp_path / "c.yaml"
    loader = {"backend_name": "hicache-mooncake", "module_path": "hicache_mooncake.backend"}
    loader["class_name"] = "HiCacheMooncakeBackend"  # SGLang refuses a file without its loader keys
    path.write_text(
        yaml.safe_dump({**loader, **top, "tiers": {"dram": {"capacity": "64MiB"}}, "sglang": sglang})
    )
    return path


def test_an_argument_that_contradicts_the_yaml_is_refused(tmp_path, capsys):
    config = write(tmp_path, {"page_size": 64})
    code, _argv, err = dry_run(capsys, config, *CPU, "--page-size", "32")
    assert code == 2 and "sglang.page_size" in err and "remove one" in err
    code, _argv, err = dry_run(capsys, config, *CPU, "--hicache-storage-backend", "file")
    assert code == 2 and "hicache-storage-backend" in err


def test_a_flag_sglang_does_not_know_is_refused(tmp_path, capsys):
    code, _argv, err = dry_run(capsys, write(tmp_path, {}), *CPU, "--no-such-flag")
    assert code == 2 and "SGLang's argument parser refuses" in err and "--no-such-flag" in err


def test_ranks_come_from_sglangs_arguments(tmp_path, capsys):
    """64 GiB of DRAM tier per rank x 512 ranks (32 TiB) is too much for any test machine."""
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump({"tiers": {"dram": {"capacity": "64GiB"}}, "sglang": {"page_size": 64}}))
    code, _argv, err = dry_run(capsys, config, *CPU, "--tp-size", "64", "--pp-size", "8")
    assert (
        code == 2
        and "x 512 ranks" in err
        and "tiers.dram.capacity" in err
        and "SGLang was not started" in err
    )
    code, _argv, err = dry_run(capsys, config, *CPU, "--tp-size", "64", "--pp-size", "8", "--nnodes", "512")
    assert "x 512 ranks" not in err


def test_a_bad_combination_is_refused_with_the_key_to_change(tmp_path, capsys):
    code, argv, err = dry_run(capsys, write(tmp_path, {"hicache_ratio": 0.5, "page_size": 64}), *CPU)
    assert code == 2 and "sglang.hicache_ratio: 0.5" in err and "use more than 1" in err
    assert argv and "--hicache-ratio" in argv  # the dry run still shows what would have run


@pytest.mark.integration
def test_launch_replaces_itself_with_sglangs_launch_server(tmp_path):
    """A real launch: SGLang's own resolution then refuses an argument, so the process ends quickly
    with SGLang's message (we do not check that flag; SGLang does)."""
    config = write(tmp_path, {"page_size": 64})
    out = subprocess.run(
        [sys.executable, "-m", "hicache_mooncake", "launch", str(config), "--", "--model-path", "/nonexistent",
         "--device", "cpu", "--hicache-host-memory-fraction", "5"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    assert "--hicache-host-memory-fraction must be in (0, 1]" in out.stderr
    assert "sglang/srt/arg_groups" in out.stderr and "hicache-mooncake launch" not in out.stderr


def test_a_config_from_the_environment_is_refused(tmp_path, capsys, monkeypatch):
    """$HICACHE_MOONCAKE_CONFIG would make the backend read another file than the one launched (and
    checked): launch refuses until it is unset or names the launched file."""
    other = tmp_path / "other.yaml"
    other.write_text("{}\n")
    monkeypatch.setenv("HICACHE_MOONCAKE_CONFIG", str(other))
    config = write(tmp_path, {"page_size": 64})
    code, _argv, err = dry_run(capsys, config, *CPU)
    assert code == 2 and f"$HICACHE_MOONCAKE_CONFIG={other} is set" in err and "SGLang was not started" in err
    monkeypatch.setenv("HICACHE_MOONCAKE_CONFIG", str(config))
    code, _argv, err = dry_run(capsys, config, *CPU)
    assert code == 0 and "HICACHE_MOONCAKE_CONFIG" not in err
