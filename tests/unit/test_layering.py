"""Dependencies point one way, and ``tiers/`` has no import cycle (issue 43).

``hicache_mooncake`` -> ``tiers`` -> (``ssd``, ``transport``) -> ``native``: ``ssd`` and
``transport`` know nothing of SGLang, of the tiers or of each other; ``tiers`` knows nothing of the
SGLang-facing package (the backend, its config, metrics, admin). Read with ``ast`` (never imported):
every import counts for the one-way rule, also one inside a function (a lazy import is still a
dependency). For cycles, the module-level imports of ``hicache_mooncake.tiers.*``, those under
``if TYPE_CHECKING:`` included: a module that needs another's type to be read while that other
imports it is one design split in two (the issue's cycle: ``runtime_ops`` typed against
``TieredStore``, which imports ``runtime_ops``). Imports inside functions do not count.
"""

from __future__ import annotations

import ast

from product_code import Module, imported_names, product_modules

LOWER = (
    "hicache_mooncake.tiers",
    "hicache_mooncake.ssd",
    "hicache_mooncake.transport",
    "hicache_mooncake.native",
)
# what each lower package may import of hicache_mooncake (anything else there is a layer above it)
MAY_IMPORT = {
    "hicache_mooncake.tiers": LOWER,
    "hicache_mooncake.ssd": ("hicache_mooncake.ssd", "hicache_mooncake.native"),
    "hicache_mooncake.transport": ("hicache_mooncake.transport", "hicache_mooncake.native"),
    "hicache_mooncake.native": ("hicache_mooncake.native",),
}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _ours(name: str) -> bool:
    return _within(name, "hicache_mooncake")


def upward_imports(module: Module, allowed: tuple[str, ...]) -> list[str]:
    """``line: name`` of each import of a hicache_mooncake module outside ``allowed``."""
    bad = []
    for node in ast.walk(module.tree()):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = imported_names(node, module)
            # ``from a import b``: a must be allowed (b is a name in it or its submodule)
            for name in names[:1] if isinstance(node, ast.ImportFrom) else names:
                if _ours(name) and name != "hicache_mooncake" and not any(_within(name, p) for p in allowed):
                    bad.append(f"{node.lineno}: {name}")
    return bad


def test_each_lower_package_imports_only_its_own_and_lower_layers() -> None:
    bad = []
    for package, allowed in MAY_IMPORT.items():
        for module in product_modules(package):
            bad += [f"{module.rel}:{where}" for where in upward_imports(module, allowed)]
    assert not bad, "imports against the one-way rule:\n" + "\n".join(bad)


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements at module level (``if TYPE_CHECKING:`` blocks included; not in functions)."""
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                out.append(stmt)
            elif isinstance(stmt, ast.If):
                visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                    visit(part)
            elif isinstance(stmt, ast.With | ast.ClassDef):
                visit(stmt.body)

    visit(tree.body)
    return out


def import_graph(modules: list[Module]) -> dict[str, set[str]]:
    """module -> the modules of ``modules`` it imports at module level."""
    known = {m.name for m in modules}
    graph: dict[str, set[str]] = {m.name: set() for m in modules}
    for module in modules:
        for node in _module_level_imports(module.tree()):
            names = imported_names(node, module)
            if isinstance(node, ast.ImportFrom):  # ``from a import b``: a, and a.b when b is a module
                targets = [names[0], *(n for n in names[1:] if n in known)]
            else:
                targets = names
            graph[module.name] |= {t for t in targets if t in known and t != module.name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as [a, b, ..., a], or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_tiers_has_no_import_cycle() -> None:
    modules = [m for m in product_modules("hicache_mooncake.tiers")]
    # a package's __init__ importing its modules, each of which is found through the package, is
    # how packages work, not a cycle: the edges into a package from its own modules are dropped
    graph = import_graph(modules)
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not _within(name, t)}
    cycle = find_cycle(graph)
    assert not cycle, "import cycle in tiers/: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle_through_a_from_import(tmp_path) -> None:
    (tmp_path / "a.py").write_text("from .b import B\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nfrom . import c\n")
    (tmp_path / "c.py").write_text("import os\n\ndef f():\n    from .a import A\n")
    mods = [Module(f"pkg.{n}", tmp_path / f"{n}.py", False) for n in "abc"]
    assert find_cycle(import_graph(mods)) == []  # c imports a only when f runs
    (tmp_path / "c.py").write_text("from pkg.a import A\n")
    assert find_cycle(import_graph(mods)) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    )
    assert find_cycle(import_graph(mods)) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]  # typed against a


def test_the_one_way_check_sees_an_import_of_a_layer_above(tmp_path) -> None:
    path = tmp_path / "x.py"
    path.write_text(
        "from hicache_mooncake.config import BackendConfig\n"
        "from ..tiers import TieredStore\n"
        "from hicache_mooncake.native import fingerprints\n"
        "def f():\n    import hicache_mooncake.transport.wire\n"
    )
    module = Module("hicache_mooncake.ssd.x", path, False)
    assert upward_imports(module, MAY_IMPORT["hicache_mooncake.ssd"]) == [
        "1: hicache_mooncake.config",
        "2: hicache_mooncake.tiers",
        "5: hicache_mooncake.transport.wire",
    ]
