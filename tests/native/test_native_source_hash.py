"""The native core records which sources it was built from: a checkout whose C changed since the
build is refused at import by name (not later as a missing method), and the build in use is the
one of the sources beside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import hicache_mooncake.native as native
from hicache_mooncake.native import _core, source_hash

SRC = Path(native.__file__).resolve().parent / "src"


def test_the_extension_in_use_was_built_from_the_sources_beside_it() -> None:
    assert len(_core.SOURCE_HASH) == 16
    assert source_hash(SRC) == _core.SOURCE_HASH


def test_the_hash_follows_every_byte_and_name_of_the_sources(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy)
    assert source_hash(copy) == source_hash(SRC)
    first = sorted(copy.glob("*.c"))[0]
    first.write_bytes(first.read_bytes() + b"\n")
    changed = source_hash(copy)
    assert changed != source_hash(SRC)
    first.rename(first.with_name("renamed_" + first.name))
    assert source_hash(copy) not in (changed, source_hash(SRC))
    assert source_hash(tmp_path / "none") == ""  # an installed package ships no sources


def test_a_checkout_whose_c_changed_since_the_build_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check the package's import runs: with the checkout's hash made to differ, it names
    the rebuild instead of letting a stale extension load."""
    native.check_built_from_these_sources()  # the build in use matches
    monkeypatch.setattr(native, "source_hash", lambda src: "f" * 16)
    with pytest.raises(
        ImportError, match="was built from other sources than native/src holds now.*pip install -e"
    ):
        native.check_built_from_these_sources()
    monkeypatch.setattr(native, "source_hash", lambda src: "")  # an installed package: nothing to compare
    native.check_built_from_these_sources()
