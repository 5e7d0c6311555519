"""A validated configuration as ``config show`` prints it: YAML whose sizes carry their unit.

A size key (one typed as a byte size in the schema) prints as ``2GiB  # 2147483648 B`` when its
value is a whole number of one unit (binary or decimal, the shorter), else as bytes with the
nearest binary figure in a comment (``12345678  # 11.8 MiB``). Either form loads back to the same
bytes, so the output is itself a valid configuration.
"""

from __future__ import annotations

import re
import typing
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from hicache_mooncake.sizes import describe_size, parse_size

_TOKEN = re.compile(r"__hicache_size_(\d+)__")


def is_size_field(model: type[BaseModel], name: str, field: FieldInfo) -> bool:
    """Whether the schema parses this field with ``parse_size``: in its type (directly or inside
    ``X | None``) or in a field validator of its model that calls it."""
    if _parses_size(field.metadata):
        return True
    if any(_parses_size(getattr(arg, "__metadata__", ())) for arg in typing.get_args(field.annotation)):
        return True
    for decorator in model.__pydantic_decorators__.field_validators.values():
        code = getattr(getattr(decorator.func, "__func__", decorator.func), "__code__", None)
        if name in decorator.info.fields and code is not None and "parse_size" in code.co_names:
            return True
    return False


def _parses_size(metadata: Any) -> bool:
    return any(getattr(m, "func", None) is parse_size for m in metadata)


def _with_tokens(model: BaseModel) -> dict[str, Any]:
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            dumped[name] = _with_tokens(value)
        elif (
            isinstance(value, int) and not isinstance(value, bool) and is_size_field(type(model), name, field)
        ):
            dumped[name] = f"__hicache_size_{value}__"
    return dumped


def _spelled(match: re.Match[str]) -> str:
    num_bytes = int(match.group(1))
    described = describe_size(num_bytes)  # "2 GiB (2147483648 B)", "11.8 MiB (12345678 B)", "512 B"
    figure = described.split(" (")[0]
    if num_bytes < 1024 or "." in figure:
        return f"{num_bytes}" + ("" if num_bytes < 1024 else f"  # {figure}")
    return f"{figure.replace(' ', '')}  # {num_bytes} B"


def sized_yaml(model: BaseModel) -> str:
    """``model`` as YAML, every size with its unit (module docstring)."""
    text = yaml.safe_dump(_with_tokens(model), sort_keys=False)
    return _TOKEN.sub(_spelled, text)
