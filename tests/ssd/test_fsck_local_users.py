"""fsck sees what the engine refuses or tightens at attach (another user's file, a link out of
the directory, files others may read), and never follows a link, even with ``--repair``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from test_ssd_fsck import _populate, _regions

from hicache_mooncake.cli import main as cli_main
from hicache_mooncake.ssd.fsck import fsck


def test_a_region_file_that_is_a_link_is_lost_not_followed(ssd_dir: str, tmp_path: Path) -> None:
    _populate(ssd_dir)
    rid, path, _gen = _regions(ssd_dir)[0]
    outside = tmp_path / "elsewhere.bin"
    shutil.copyfile(path, outside)  # a valid region: followed, it would pass as this region
    before = outside.read_bytes()
    os.unlink(path)
    os.symlink(outside, path)
    rep = fsck([ssd_dir])
    assert not rep.clean, rep.summary()
    assert [(x["region"], x["path"]) for x in rep.lost_regions] == [(rid, path)], rep.summary()
    assert "symbolic link" in rep.lost_regions[0]["reason"]
    assert all(r.path != path for r in rep.regions)  # never scanned through the link
    assert cli_main(["fsck", ssd_dir, "--repair"]) == 1
    assert outside.read_bytes() == before and os.path.islink(path)


def test_files_others_may_read_are_a_warning(ssd_dir: str) -> None:
    _populate(ssd_dir)
    _rid, path, _gen = _regions(ssd_dir)[0]
    os.chmod(path, 0o644)  # as stores written before the rule were
    rep = fsck([ssd_dir])
    assert rep.clean and any(path in w and "0644" in w for w in rep.warnings), rep.summary()
