"""The product does not import its tooling.

``tools/`` (installed as ``hicache_mooncake.tools``: benchmarks, replay, demos, the SGLang harness)
imports the product; the product (``hicache_mooncake/``, ``tiers/``, ``ssd/``, ``transport/``) never
imports ``tools``, so a deployment's picture and its import graph show the product alone. The only
exception is the CLI's thin entry points for the tooling commands, and those import it inside a
function (when the command's parser is built or the command runs), never at module level.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "hicache_mooncake.tools"
PRODUCT_DIRS = {
    "hicache_mooncake": ROOT / "hicache_mooncake",
    "hicache_mooncake.tiers": ROOT / "tiers",
    "hicache_mooncake.ssd": ROOT / "ssd",
    "hicache_mooncake.transport": ROOT / "transport",
}
ENTRY_POINTS = {f"hicache_mooncake.commands.{name}" for name in ("bench", "replay", "demo", "demo_share")}


def _modules() -> dict[str, Path]:
    found = {}
    for package, base in PRODUCT_DIRS.items():
        for path in base.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(base).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join([package, *rel])] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute names an ``import`` / ``from ... import`` statement brings in (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".")
            keep = len(parts) - node.level + (1 if is_package else 0)
            base = ".".join(parts[:keep] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def _tools_imports(path: Path, module: str) -> tuple[list[int], list[int]]:
    """Line numbers of imports of the tooling: (at module level, inside a function or class)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            nested.update(id(inner) for inner in ast.walk(node) if inner is not node)
    top, inner = [], []
    for node in ast.walk(tree):
        names = _imported(node, module, path.name == "__init__.py")
        if any(name == TOOLS or name.startswith(TOOLS + ".") for name in names):
            (inner if id(node) in nested else top).append(node.lineno)
    return top, inner


def test_no_product_module_imports_the_tooling() -> None:
    modules = _modules()
    assert "hicache_mooncake.backend" in modules and "hicache_mooncake.ssd.engine" in modules
    assert not any(name.startswith(TOOLS) for name in modules), "tools/ must not sit inside the product"
    offenders = []
    for module, path in sorted(modules.items()):
        top, inner = _tools_imports(path, module)
        if top:
            offenders.append(f"{path.relative_to(ROOT)}:{top[0]} imports {TOOLS} at module level")
        if inner and module not in ENTRY_POINTS:
            offenders.append(
                f"{path.relative_to(ROOT)}:{inner[0]} imports {TOOLS} (only CLI entry points may)"
            )
    assert not offenders, "\n".join(offenders)


def test_the_scan_sees_an_import_of_the_tooling(tmp_path: Path) -> None:
    """The scan is not vacuous: absolute, ``from`` and relative imports of tools are all found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import hicache_mooncake.tools.bench\n"
        "from hicache_mooncake import tools\n"
        "from ..tools.sglang_harness import PoolShape\n"
        "def later():\n"
        "    from hicache_mooncake.tools.replay import run\n"
    )
    top, inner = _tools_imports(sample, "hicache_mooncake.commands.sample")
    assert top == [1, 2, 3] and inner == [5]


def test_the_tooling_is_installed_as_hicache_mooncake_tools() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert conf["package-dir"][TOOLS] == "tools"
    assert {TOOLS, f"{TOOLS}.bench", f"{TOOLS}.replay", f"{TOOLS}.demo"} <= set(conf["packages"])
    assert not (ROOT / "hicache_mooncake" / "bench").exists()
    assert not (ROOT / "hicache_mooncake" / "replay").exists()
