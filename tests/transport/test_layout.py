"""transport/'s folders keep the map its entry docstring states: the memory node (``node/``) is
apart from the client side, RDMA is one package, and the map names every module there is."""

from __future__ import annotations

import ast
from pathlib import Path

import hicache_mooncake.transport as transport
from hicache_mooncake.transport.registry import engine_class

ROOT = Path(transport.__file__).resolve().parent
PKG = "hicache_mooncake.transport"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join([PKG, *parts])


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved; ``from X import y`` counts X.y too)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def test_only_the_entry_module_imports_the_node_package() -> None:
    node = f"{PKG}.node"
    offenders = {
        _module_name(p): sorted(m for m in _imports(p) if m == node or m.startswith(node + "."))
        for p in _modules()
        if p != ROOT / "__init__.py" and not p.is_relative_to(ROOT / "node")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_rdma_is_one_package_and_the_engine_registers_from_it() -> None:
    assert not list(ROOT.glob("rdma_*.py")), "RDMA modules belong in transport/rdma/"
    assert engine_class("rdma").__module__ == f"{PKG}.rdma.engine"


def test_the_entry_docstring_maps_every_module_and_folder() -> None:
    doc = transport.__doc__ or ""
    missing = []
    for p in _modules():
        rel = p.relative_to(ROOT)
        if rel.parent == Path("."):
            if p.stem != "__init__" and f"``{p.stem}``" not in doc:
                missing.append(str(rel))
        elif f"``{rel.parts[0]}/``" not in doc:
            missing.append(str(rel))
    assert missing == []
    for sub in ("node", "rdma"):  # each folder's own entry docstring names its modules
        subdoc = (ROOT / sub / "__init__.py").read_text()
        unnamed = [
            p.stem
            for p in (ROOT / sub).glob("*.py")
            if p.stem != "__init__" and f"``{p.stem}``" not in subdoc
        ]
        assert unnamed == [], f"{sub}/__init__.py does not name {unnamed}"
