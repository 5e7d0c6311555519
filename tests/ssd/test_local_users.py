"""The SSD tier (and the host cache's directory) against other local users: its files are the
serving user's alone, and a store someone else planted (or a link out of the directory) is
refused at attach, never served.

A second OS user is created per test run (``useradd``; removed in a ``finally``) and runs real
processes under its uid; the stores are built by the real store builder (the backend's) over the
real SSD engine. CI runs as root, which these tests need (creating a user, switching to it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.config import BackendConfig, ConfigError
from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.host_cache.lock import try_lock
from hicache_mooncake.host_cache.paths import HostCachePaths
from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.ssd.format import parse_region_file_name
from hicache_mooncake.ssd.private_dir import SsdUnsafePathError
from hicache_mooncake.store_builder import build_store

PAGE = 64 << 10
KEYS = [f"page-{i}" for i in range(24)]


def _value(key: str) -> np.ndarray:
    return np.frombuffer((key.encode() * (PAGE // len(key) + 1))[:PAGE], np.uint8)


def _config(base: str | Path) -> BackendConfig:
    return validate_config(
        {
            "tiers": {
                "policy": "lru",
                "dram": {"capacity": "1MiB", "slab_size": "256KiB", "prefault": False},
                "ssd": {
                    "enabled": True,
                    "path": str(base),
                    "capacity": "8MiB",
                    "region_size": "1MiB",
                    "min_free": 0,
                    "direct_io": "off",
                    "mode": "write_through",
                },
                "warm": {"enabled": False},
            }
        }
    )


def _write_store(base: str | Path) -> None:
    """A store with every key of KEYS on SSD (written through, flushed at close)."""
    store = build_store(_config(base), "rank0")
    try:
        assert all(store.put_batch(KEYS, [[memoryview(_value(k))] for k in KEYS]))
        assert store.flush(30)
    finally:
        store.close(flush_timeout_s=10)


def _served(base: str | Path) -> int:
    """How many KEYS a store built over ``base`` serves (bytes checked)."""
    store = build_store(_config(base), "rank0")
    try:
        outs = [np.zeros(PAGE, np.uint8) for _ in KEYS]
        hits = store.get_batch_into(KEYS, [[memoryview(o)] for o in outs])
        for key, hit, out in zip(KEYS, hits, outs, strict=True):
            assert not hit or np.array_equal(out, _value(key)), key
        return sum(hits)
    finally:
        store.close()


def _region_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if parse_region_file_name(p.name) is not None)


@pytest.fixture
def other_user() -> Iterator[pwd.struct_passwd]:
    """A second OS user, made for this test and removed after it."""
    name = f"hcm-test-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    made = subprocess.run(
        ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], capture_output=True, text=True
    )
    assert made.returncode == 0, f"useradd {name}: {made.stderr.strip()} (these tests run as root)"
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)


def _as_user(user: pwd.struct_passwd, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd), user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True,
        text=True, timeout=30, cwd="/",
    )  # fmt: skip


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory every local user can enter (as /var/tmp is): pytest's own tmp_path is not."""
    d = Path(tempfile.mkdtemp(prefix="hcm-local-users-", dir="/tmp"))
    try:
        d.chmod(0o755)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_another_user_cannot_read_a_region_file(other_user: Any, shared_tmp: Path) -> None:
    base = shared_tmp / "hicache-mooncake"
    _write_store(base)
    rank = base / "rank0"
    regions = _region_files(rank)
    assert regions
    assert stat.S_IMODE(rank.stat().st_mode) == 0o700
    for entry in rank.iterdir():
        mode = stat.S_IMODE(entry.lstat().st_mode)
        assert mode & 0o077 == 0, f"{entry} is mode {mode:04o}: group or others may read it"
    for path in regions:
        r = _as_user(other_user, "cat", str(path))
        assert r.returncode != 0 and "Permission denied" in r.stderr, (path, r.returncode, r.stderr)
        assert r.stdout == ""
    # the files themselves refuse, even where the directory were opened up
    rank.chmod(0o755)
    r = _as_user(other_user, "cat", str(regions[0]))
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr


def test_a_store_planted_by_another_user_at_the_path_is_refused(other_user: Any) -> None:
    """The other user creates the base directory first (in a world-writable, sticky directory, as
    /var/tmp is) and fills it with a real store; the backend refuses it at attach and serves none
    of it."""
    public = Path(tempfile.mkdtemp(prefix="hcm-public-", dir="/tmp"))
    try:
        public.chmod(0o1777)
        staging = public / "staging"
        _write_store(staging)  # a genuine store (the planter could have written it the same way)
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        base = public / "hicache-mooncake"
        planted = _as_user(other_user, "cp", "-r", str(staging), str(base))
        assert planted.returncode == 0, planted.stderr
        assert base.stat().st_uid == other_user.pw_uid and _region_files(base / "rank0")
        with pytest.raises(ConfigError) as err:
            _served(base)
        msg = str(err.value)
        assert "tiers.ssd.path" in msg and str(base) in msg, msg
        assert f"uid {other_user.pw_uid} ({other_user.pw_name})" in msg and "chown" in msg, msg
    finally:
        shutil.rmtree(public, ignore_errors=True)


def test_a_file_of_another_user_in_the_rank_directory_is_refused(other_user: Any, tmp_path: Path) -> None:
    _write_store(tmp_path / "ssd")
    region = _region_files(tmp_path / "ssd" / "rank0")[0]
    os.chown(region, other_user.pw_uid, other_user.pw_gid)
    with pytest.raises(ConfigError) as err:
        _served(tmp_path / "ssd")
    msg = str(err.value)
    assert "tiers.ssd.path" in msg and str(region) in msg and f"uid {other_user.pw_uid}" in msg, msg


def test_a_base_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "ssd"
    base.mkdir()
    base.chmod(0o777)
    with pytest.raises(ConfigError) as err:
        _served(base)
    msg = str(err.value)
    assert "tiers.ssd.path" in msg and str(base) in msg and "0777" in msg and f"chmod 700 {base}" in msg, msg
    assert not (base / "rank0").exists()  # refused before anything was made in it


def test_a_region_file_linking_out_of_the_directory_is_refused_not_followed(tmp_path: Path) -> None:
    _write_store(tmp_path / "ssd")
    rank = tmp_path / "ssd" / "rank0"
    region = _region_files(rank)[0]
    outside = tmp_path / "elsewhere.bin"
    shutil.copyfile(region, outside)  # a valid region file: following the link would serve it
    before = outside.read_bytes()
    region.unlink()
    region.symlink_to(outside)
    with pytest.raises(ConfigError) as err:
        _served(tmp_path / "ssd")
    msg = str(err.value)
    assert "tiers.ssd.path" in msg and str(region) in msg and "symbolic link" in msg, msg
    # the engine alone (no store builder) refuses it too
    with pytest.raises(SsdUnsafePathError, match="symbolic link"):
        SsdEngine(SsdOptions(dirs=(str(rank),), capacity_bytes=8 << 20, region_size=1 << 20, direct_io="off"))
    assert outside.read_bytes() == before and region.is_symlink()


def test_a_store_written_before_the_rule_is_tightened_and_still_served(tmp_path: Path) -> None:
    """Old stores have 0755 directories and 0644 files (another user could read them): attach
    makes them 0700/0600 and serves every page as before."""
    _write_store(tmp_path / "ssd")
    rank = tmp_path / "ssd" / "rank0"
    rank.chmod(0o755)
    for entry in rank.iterdir():
        entry.chmod(0o644)
    assert _served(tmp_path / "ssd") == len(KEYS)
    assert stat.S_IMODE(rank.stat().st_mode) == 0o700
    modes = {e.name: stat.S_IMODE(e.lstat().st_mode) for e in rank.iterdir()}
    assert all(m & 0o077 == 0 for m in modes.values()), modes


def test_a_link_as_the_base_directory_is_followed_only_when_ours(other_user: Any, tmp_path: Path) -> None:
    """An operator may point tiers.ssd.path at another disk with a link of their own; a link
    another user made (in a sticky directory they can write) is refused."""
    real = tmp_path / "disk"
    real.mkdir(mode=0o700)
    ours = tmp_path / "ours"
    ours.symlink_to(real)
    _write_store(ours)
    assert _served(ours) == len(KEYS)
    theirs = tmp_path / "theirs"
    theirs.symlink_to(real)
    os.chown(theirs, other_user.pw_uid, other_user.pw_gid, follow_symlinks=False)
    with pytest.raises(ConfigError, match=r"symbolic link owned by uid \d+"):
        _served(theirs)


def test_a_base_directory_others_could_swap_is_refused(tmp_path: Path) -> None:
    """Its parent is writable by others and not sticky: the directory could be renamed away and
    replaced by another user's between the check and an open."""
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    base = parent / "ssd"
    with pytest.raises(ConfigError) as err:
        _served(base)
    msg = str(err.value)
    assert "tiers.ssd.path" in msg and str(parent) in msg and "not sticky" in msg and "chmod +t" in msg, msg
    parent.chmod(0o1777)  # sticky, as /var/tmp: only the owner may rename or remove what is in it
    assert _served(base) == 0


# the host cache's directory: socket, lock, log and the YAML it runs


def test_a_host_cache_directory_another_user_made_first_is_refused(other_user: Any, shared_tmp: Path) -> None:
    shared_tmp.chmod(0o1777)  # as /tmp, where the default directory lives without XDG_RUNTIME_DIR
    planted = shared_tmp / "hicache-mooncake-0"
    made = _as_user(other_user, "mkdir", "-m", "700", str(planted))
    assert made.returncode == 0, made.stderr
    with pytest.raises(ValueError) as err:
        HostCachePaths(str(planted), "default").ensure_dir()
    msg = str(err.value)
    assert "host_cache.dir" in msg and str(planted) in msg and f"uid {other_user.pw_uid}" in msg, msg
    assert "chown" in msg and "choose another host_cache.dir" in msg, msg


def test_an_old_host_cache_directory_others_could_read_is_made_private(
    other_user: Any, shared_tmp: Path
) -> None:
    paths = HostCachePaths(str(shared_tmp / "hc"), "default")
    Path(paths.dir).mkdir(mode=0o755)
    Path(paths.dir).chmod(0o755)
    Path(paths.log).write_text("host cache log\n")
    Path(paths.log).chmod(0o644)  # as an earlier version left it
    assert _as_user(other_user, "cat", paths.log).returncode == 0  # readable before the start
    paths.ensure_dir()
    fd = try_lock(paths.lock)
    assert fd is not None
    for path in (paths.log, paths.lock):
        r = _as_user(other_user, "cat", path)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (path, r.stderr)
