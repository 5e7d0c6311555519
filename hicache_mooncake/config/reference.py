"""Render the configuration reference (every key, its default, its meaning) from the schema, so
the table in ``docs/configuration.md`` can not drift from the code (a test compares them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from hicache_mooncake.sizes import format_size, parse_size

from .schema import BackendConfig

_SIZE_NAMES = {"capacity", "max_meta", "max_payload"}

BEGIN = "<!-- config-reference:begin (generated: python -m hicache_mooncake.config.reference --write docs/configuration.md) -->"
END = "<!-- config-reference:end -->"


def _default(value: Any, is_size: bool = False) -> str:
    if is_size and isinstance(value, int):
        return f"`{format_size(value)}`"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, str):
        return f"`{value!r}`" if value == "" else f"`{value}`"
    return f"`{value}`"


def rows(model: type[BaseModel] = BackendConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        nested = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if nested is None:
            args = getattr(annotation, "__args__", ())
            nested = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if nested is not None and field.default_factory is None:
            out.append((key, "(section)", (field.description or "").replace("\n", " ")))
            out.extend(rows(nested, f"{key}."))
            continue
        default = field.get_default(call_default_factory=True)
        is_size = any(getattr(m, "func", None) is parse_size for m in field.metadata) or name in _SIZE_NAMES
        out.append(
            (
                key,
                _default(default, is_size),
                (field.description or "").replace("\n", " ").replace("|", "\\|"),
            )
        )
    return out


def markdown() -> str:
    lines = [BEGIN, "", "| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {d} | {m} |" for k, d, m in rows()]
    lines += ["", END]
    return "\n".join(lines)


def update_file(path: str) -> None:
    """Replace the generated section of ``path`` (``docs/configuration.md``) in place."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:start] + markdown() + text[end:])


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        update_file(sys.argv[2])
    else:
        print(markdown())
