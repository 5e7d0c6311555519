"""No product module uses another object's underscore fields (issue 43: "no module uses another's
underscore fields").

Scanned with ``ast`` (never imported): every ``x._name`` where ``x`` is not ``self``, ``cls`` or
``super()``, and every ``from m import _name`` / ``import m._name`` of another module's private
name (a package may import its own private modules: ``from . import _core``). Dunders are public
protocol. What is read through ``getattr(x, "_name")`` is a reach too, and is scanned the same way.

Two lists say what is allowed, each entry with its reason:
- ``STDLIB``: attributes of the standard library or of libraries we run on whose underscore is not
  "private" (namedtuple's ``_replace``) or that have no public equivalent;
- ``OFFENDERS``: today's reaches into a module we do not own yet, by ``file: attribute``; it only
  shrinks (an entry that no longer occurs fails the test, so it is removed with the fix).
"""

from __future__ import annotations

import ast

from product_code import Module, imported_names, product_modules

STDLIB: dict[str, str] = {
    "_replace": "namedtuple's public API (the underscore keeps it apart from field names)",
    "_asdict": "namedtuple's public API",
    "_fields": "namedtuple's public API",
    "_make": "namedtuple's public API",
    "_getframe": "sys._getframe: CPython's documented frame access",
    "_exit": "os._exit: the documented exit without cleanup (a forked child)",
}
# (file, attribute): reason. The standard library's argparse has no public way to list a parser's
# actions (ours, to walk subcommands; SGLang's, to find the flag of a YAML key): those stay.
OFFENDERS: dict[tuple[str, str], str] = {
    ("hicache_mooncake/cli.py", "_actions"): "argparse: no public list of a parser's actions",
    ("hicache_mooncake/cli.py", "_SubParsersAction"): "argparse: the subparsers action has no public class",
    ("hicache_mooncake/launch_command.py", "_actions"): "argparse: SGLang's parser, searched by flag",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def reaches(module: Module) -> list[tuple[int, str]]:
    """(line, private name) of each reach of ``module`` into another object's private fields."""
    package = module.name if module.is_package else module.name.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(module.tree()):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _own(node.value):
            found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and not _own(node.args[0])
        ):
            found.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.ImportFrom):
            base = imported_names(node, module)[0]
            found += [(node.lineno, a.name) for a in node.names if _private(a.name) and base != package]
        elif isinstance(node, ast.Import):
            for name in imported_names(node, module):
                found += [(node.lineno, part) for part in name.split(".") if _private(part)]
    return found


def test_no_module_uses_another_objects_underscore_fields() -> None:
    seen: set[tuple[str, str]] = set()
    bad: list[str] = []
    for module in product_modules():
        for line, name in reaches(module):
            if name in STDLIB:
                continue
            seen.add((module.rel, name))
            if (module.rel, name) not in OFFENDERS:
                bad.append(f"{module.rel}:{line}: .{name}")
    assert not bad, "private reaches (use a public name, or give the owner one):\n" + "\n".join(bad)
    gone = sorted(set(OFFENDERS) - seen)
    assert not gone, f"fixed: remove from OFFENDERS: {gone}"


def _scan(source: str, name: str = "hicache_mooncake.example") -> list[tuple[int, str]]:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "example.py"
        path.write_text(source)
        return reaches(Module(name, path, False))


def test_the_scanner_sees_each_kind_of_reach_and_passes_own_fields() -> None:
    assert _scan("store._placement.admit(k)\n") == [(1, "_placement")]
    assert _scan("getattr(store, '_lock')\n") == [(1, "_lock")]
    assert _scan("from hicache_mooncake.tiers.tiered_store import _put_local\n") == [(1, "_put_local")]
    assert _scan("import hicache_mooncake._secret\n") == [(1, "_secret")]
    own = "class A:\n    def f(self):\n        return self._x, super()._y(), cls._z, x.__class__\n"
    assert _scan(own) == []
    assert _scan("from . import _core\n", "hicache_mooncake.native.io") == []
    assert _scan("from .tiers import _num\n", "hicache_mooncake.metrics.node") == [(1, "_num")]
