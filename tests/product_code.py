"""The product's Python modules, as the architecture tests read them (``ast``, never imported).

Product code is what a deployment runs: ``hicache_mooncake/`` and the folders installed under
it (``tiers/``, ``ssd/``, ``transport/``, ``native/``). The tooling (``tools/``, installed as
``hicache_mooncake.tools``) and the tests are not product code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_DIRS = {
    "hicache_mooncake": ROOT / "hicache_mooncake",
    "hicache_mooncake.tiers": ROOT / "tiers",
    "hicache_mooncake.ssd": ROOT / "ssd",
    "hicache_mooncake.transport": ROOT / "transport",
    "hicache_mooncake.native": ROOT / "native",
}


@dataclass(frozen=True)
class Module:
    name: str
    """The import name, e.g. ``hicache_mooncake.tiers.mover``."""
    path: Path
    is_package: bool

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(ROOT))

    def tree(self) -> ast.Module:
        return ast.parse(self.path.read_text(encoding="utf-8"), filename=str(self.path))


def product_modules(*packages: str) -> Iterator[Module]:
    """Every module of the named product packages (default: all of them), sorted by path."""
    for package, base in PRODUCT_DIRS.items():
        if packages and package not in packages:
            continue
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(base).with_suffix("").parts
            is_package = rel[-1] == "__init__"
            if is_package:
                rel = rel[:-1]
            if package == "hicache_mooncake" and rel and f"{package}.{rel[0]}" in PRODUCT_DIRS:
                continue  # a link into another product folder (the typecheck tree): read it there
            yield Module(".".join([package, *rel]), path, is_package)


def imported_names(node: ast.Import | ast.ImportFrom, module: Module) -> list[str]:
    """Absolute names an import statement brings in, relative ones resolved: for ``from a import b``
    both ``a`` and ``a.b`` (b may be a module or a name in a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        parts = module.name.split(".")
        keep = len(parts) - node.level + (1 if module.is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]
