"""``launch`` runs the checks of ``config validate`` before SGLang starts: a file SGLang's own
extra-config parser refuses, or an SSD directory this host cannot serve, is refused by ``launch
--dry-run`` with the same words (before: the dry run printed the command and exited 0)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from hicache_mooncake.cli import main

pytestmark = pytest.mark.sglang
CPU = ["--model-path", "dummy", "--device", "cpu"]
LOADER = {
    "backend_name": "hicache-mooncake",
    "module_path": "hicache_mooncake.backend",
    "class_name": "HiCacheMooncakeBackend",
}


def dry_run(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[int, list[str], str]:
    code = main(["launch", "--dry-run", str(config), "--", *CPU])
    out = capsys.readouterr()
    return code, shlex.split(out.out.strip()), out.err


def test_launch_refuses_an_empty_file_with_sglangs_own_error(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, argv, err = dry_run(capsys, empty)
    assert code == 2 and "'NoneType' object has no attribute 'pop'" in err and "SGLang was not started" in err
    assert argv and argv[2] == "sglang.launch_server"  # the dry run still shows what would have run


def test_launch_refuses_a_file_without_loader_keys(tmp_path, capsys):
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"sglang": {"page_size": 64}}))
    code, _argv, err = dry_run(capsys, partial)
    assert code == 2 and "Missing required field 'backend_name'" in err


def test_launch_refuses_an_ssd_directory_that_cannot_be_created(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    ssd = {"enabled": True, "path": "/proc/nope", "capacity": "8MiB", "region_size": "1MiB", "min_free": 0}
    cfg.write_text(yaml.safe_dump({**LOADER, "tiers": {"ssd": ssd}, "sglang": {"page_size": 64}}))
    code, _argv, err = dry_run(capsys, cfg)
    assert code == 2 and "tiers.ssd.path: '/proc/nope' does not exist and cannot be created" in err
