"""The package map (folder -> import name) is stated once, and the tree agrees with it.

``tiers/``, ``ssd/``, ``transport/``, ``native/``, ``tools/`` and ``configs/`` live at the top of the
repository but import as ``hicache_mooncake.<folder>`` (pyproject's ``package-dir``), so a newcomer
cannot read the import path off the folder path. The map is written for people in
docs/architecture.md ("Package map": folder, import name, its one job) and for setuptools in
pyproject.toml (``packages`` and ``package-dir``). This test fails when the two disagree, when a
folder with an ``__init__.py`` is missing from the map, when a package does not import from the
folder the map names, or when a package's entry docstring (its ``__init__.py``) does not state its job
in its first one or two lines.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
NOT_PACKAGES = {"tests", "build", ".venv", ".git", "benchmarks", "scripts", "deploy"}
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|(.+)\|\s*$")


def doc_map() -> dict[str, str]:
    """folder -> import name, from the doc's "Package map" table (one row per package)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Package map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if m := ROW.match(line):
            folder = m.group(1).rstrip("/")
            assert folder not in rows, f"architecture.md: {folder}/ has two rows"
            assert m.group(3).strip(), f"architecture.md: {folder}/ has no job"
            rows[folder] = m.group(2)
    assert rows, "architecture.md: no package map table under '## Package map'"
    return rows


def pyproject_map() -> dict[str, str]:
    """folder -> import name of every package pyproject installs (``package-dir`` maps a package's
    folder; a subpackage lies in its parent's folder, as setuptools finds it)."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs: dict[str, str] = conf.get("package-dir", {})
    out: dict[str, str] = {}
    for package in conf["packages"]:
        parts = package.split(".")
        for n in range(len(parts), 0, -1):
            if (prefix := ".".join(parts[:n])) in dirs:
                folder = "/".join([dirs[prefix], *parts[n:]])
                break
        else:
            folder = "/".join(parts)
        out[folder] = package
    return out


def package_folders() -> set[str]:
    """Every folder of the repository holding an ``__init__.py`` (tests and build output aside)."""
    found = set()
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and rel.parts[0] not in NOT_PACKAGES and not rel.parts[0].endswith(".egg-info"):
            found.add(str(rel))
    return found


def test_the_doc_and_pyproject_state_the_same_map() -> None:
    doc, setup = doc_map(), pyproject_map()
    only_doc = {f: doc[f] for f in doc.keys() - setup.keys()}
    only_setup = {f: setup[f] for f in setup.keys() - doc.keys()}
    differ = {f: (doc[f], setup[f]) for f in doc.keys() & setup.keys() if doc[f] != setup[f]}
    assert not (only_doc or only_setup or differ), (
        f"architecture.md's package map and pyproject disagree: only in the doc {only_doc}, "
        f"only in pyproject {only_setup}, other import names (doc, pyproject) {differ}"
    )


def test_every_package_folder_is_in_the_map_with_its_entry_docstring() -> None:
    doc = doc_map()
    missing = sorted(package_folders() - doc.keys())
    assert not missing, f"folders with an __init__.py missing from architecture.md's package map: {missing}"
    silent, long = [], []
    for folder in sorted(doc):
        init = ROOT / folder / "__init__.py"
        if not init.exists():
            continue  # a namespace package (hicache_mooncake/): the map's row states its job
        text = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if not text:
            silent.append(folder)
        elif len(text.split("\n\n", 1)[0].splitlines()) > 2:
            long.append(folder)
    assert not silent, f"packages whose __init__.py does not state their job in a docstring: {silent}"
    assert not long, f"packages whose entry docstring takes more than two lines to state the job: {long}"


def test_each_package_imports_from_the_folder_the_map_names() -> None:
    wrong = {}
    for folder, name in doc_map().items():
        spec = importlib.util.find_spec(name)
        places = [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
        if (ROOT / folder).resolve() not in places:
            wrong[name] = (folder, [str(p) for p in places])
    assert not wrong, f"installed elsewhere than the map says (import name: (folder, found at)): {wrong}"
