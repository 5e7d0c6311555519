"""The extra-config file as SGLang itself reads it, before our loader sees it.

SGLang (``--hicache-storage-backend dynamic --hicache-storage-backend-extra-config @FILE``) parses
FILE with ``HybridCacheController.parse_storage_backend_extra_config`` (it pops and type-checks its
prefetch keys; an empty file fails there with ``'NoneType' object has no attribute 'pop'``), then
``StorageBackendFactory._create_dynamic_backend`` refuses a dict without ``backend_name``,
``module_path`` or ``class_name``. Our loader fills those keys in from their defaults, so a file it
accepts may still be one SGLang refuses: ``sglang_refusals(FILE)`` says whether SGLang would.

Where SGLang is installed, SGLang's OWN code runs: the parsing function is read from SGLang's
source file and executed alone (importing its module would import torch and most of SGLang, about
15 s), and the required fields are read from the factory's source. Where SGLang is not installed,
or its source no longer has these functions, ``_equivalent_parse`` applies the same rules (those of
SGLang 0.5.23) and the first finding says which of the two ran.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hicache_mooncake.checks.findings import Finding

PARSER_FILE = "srt/mem_cache/hybrid_cache/hybrid_cache_controller.py"
PARSER_CLASS, PARSER_FUNCTION = "HybridCacheController", "parse_storage_backend_extra_config"
FACTORY_FILE = "srt/mem_cache/storage/backend_factory.py"
FACTORY_FUNCTION = "_create_dynamic_backend"
REQUIRED_FIELDS = ("backend_name", "module_path", "class_name")
"""SGLang 0.5.23's required keys of a ``dynamic`` backend (used where SGLang's source is absent)."""
OUR_MODULE, OUR_CLASS = "hicache_mooncake.backend", "HiCacheMooncakeBackend"


def sglang_refusals(path: str | os.PathLike[str]) -> list[Finding]:
    """Findings for ``path`` (no ``@``) read as SGLang reads ``@path``: errors where SGLang would
    refuse to start, and one note saying whose code checked it. Never raises."""
    file = str(Path(path).expanduser().resolve())
    source = _sglang_source()
    parse = _load_function(source / PARSER_FILE, PARSER_FUNCTION, PARSER_CLASS) if source else None
    required = _required_fields(source / FACTORY_FILE) if source else None
    if parse is not None and required is not None:
        checked_by = f"SGLang's own {PARSER_CLASS}.{PARSER_FUNCTION} ({source})"
    else:
        parse, required = _equivalent_parse, REQUIRED_FIELDS
        why = (
            "SGLang is not installed here"
            if source is None
            else f"SGLang's source at {source} has no {PARSER_FUNCTION}"
        )
        checked_by = f"hicache-mooncake's copy of SGLang 0.5.23's rules ({why})"
    out = [Finding("note", f"extra-config parsing checked with {checked_by}")]
    try:
        parsed = parse(f"@{file}")[0]
    except Exception as exc:  # SGLang's own error, whatever its type
        hint = " (the file is empty: SGLang needs at least its loader keys)" if "NoneType" in str(exc) else ""
        return [*out, Finding("error", f"SGLang's extra-config parser refuses the file: {exc}{hint}")]
    if not isinstance(parsed, dict):
        return [*out, Finding("error", f"SGLang reads the file as {type(parsed).__name__}, not a mapping")]
    for field in required:
        if field not in parsed:
            out.append(
                Finding(
                    "error",
                    f"{field}: missing; SGLang refuses the file (\"Missing required field '{field}' in backend "
                    "config for 'dynamic' backend\"); write the loader keys of configs/default.yaml "
                    "(backend_name: hicache-mooncake, module_path: hicache_mooncake.backend, "
                    "class_name: HiCacheMooncakeBackend)",
                )
            )
    return [*out, *_loadable(parsed)]


def _loadable(parsed: dict[str, Any]) -> list[Finding]:
    """SGLang imports ``module_path`` and takes ``class_name`` from it: is the module there?"""
    module_path, class_name = parsed.get("module_path"), parsed.get("class_name")
    if not isinstance(module_path, str) or not module_path:
        return []
    try:
        found = importlib.util.find_spec(module_path) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return [
            Finding(
                "error", f"module_path: {module_path!r} is not importable here; SGLang would fail to load it"
            )
        ]
    if module_path == OUR_MODULE and class_name != OUR_CLASS:
        return [Finding("error", f"class_name: {class_name!r} is not in {OUR_MODULE}; write {OUR_CLASS}")]
    return []


def _sglang_source() -> Path | None:
    """SGLang's package directory, found without importing it."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _function_node(tree: ast.Module, name: str, owner: str | None) -> ast.FunctionDef | None:
    scopes: list[Any] = [tree]
    if owner is not None:
        scopes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner]
    for scope in scopes:
        for node in scope.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    return None


def _load_function(file: Path, name: str, owner: str | None) -> Callable[[str], Any] | None:
    """SGLang's function ``owner.name`` compiled alone from its source (a staticmethod that needs
    only ``os`` and ``json``); None when the source or the function is not there."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError):
        return None
    node = _function_node(tree, name, owner)
    if node is None:
        return None
    node.decorator_list = []
    module = ast.Module(body=[node], type_ignores=[])
    namespace: dict[str, Any] = {"os": os, "json": json, "Optional": Any, "__name__": f"sglang_copy_{name}"}
    try:
        exec(compile(module, str(file), "exec"), namespace)  # noqa: S102 - SGLang's own code, read from its package
    except Exception:
        return None
    function: Callable[[str], Any] = namespace[name]
    return function


def _required_fields(file: Path) -> tuple[str, ...] | None:
    """The literal ``required_fields = [...]`` of SGLang's dynamic-backend factory."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError):
        return None
    node = _function_node(tree, FACTORY_FUNCTION, "StorageBackendFactory")
    if node is None:
        return None
    for statement in ast.walk(node):
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "required_fields" for t in statement.targets
        ):
            try:
                return tuple(ast.literal_eval(statement.value))
            except ValueError:
                return None
    return None


def _equivalent_parse(spec: str) -> tuple[Any, ...]:
    """SGLang 0.5.23's parsing of ``@FILE`` (YAML/JSON by extension; its prefetch keys popped and
    type-checked), for where its source is absent. Raises as SGLang would."""
    path = spec[1:]
    ext = os.path.splitext(path)[1].lower()
    with open(path, encoding="utf-8") as f:
        if ext == ".json":
            data = json.load(f)
        elif ext in (".yaml", ".yml"):
            data = yaml.safe_load(f)
        else:
            raise ValueError(f"Unsupported config file {path} (config format: {ext})")
    if data is None:
        raise AttributeError("'NoneType' object has no attribute 'pop'")
    threshold = data.pop("prefetch_threshold", 256)
    base = data.pop("prefetch_timeout_base", 1)
    per_ki = data.pop("prefetch_timeout_per_ki_token", 0.25)
    prefix_keys = data.pop("hicache_storage_pass_prefix_keys", False)
    if not isinstance(threshold, int):
        raise ValueError(f"prefetch_threshold must be int, got {type(threshold).__name__}")
    for key, value in (("prefetch_timeout_base", base), ("prefetch_timeout_per_ki_token", per_ki)):
        if not isinstance(value, int | float):
            raise ValueError(f"{key} must be number, got {type(value).__name__}")
    if not isinstance(prefix_keys, bool):
        raise ValueError(f"hicache_storage_pass_prefix_keys must be bool, got {type(prefix_keys).__name__}")
    return data, threshold, float(base), float(per_ki), prefix_keys
