"""The wheel must contain every subpackage: pyproject lists them by hand (tiers/, ssd/ and
transport/ live at the top level and are mapped under hicache_mooncake)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    dirs = {name: Path(path) for name, path in conf["package-dir"].items()}
    found = set()
    for name, base in dirs.items():
        for init in (ROOT / base).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / base)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found <= listed, f"missing from pyproject packages: {sorted(found - listed)}"


def test_license_file_is_the_apache_2_license_pyproject_names() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 190
