"""JSON Schema as Markdown: the shared words of the job-file and HTTP API references."""

from __future__ import annotations

import html
import json
from typing import Any

__all__ = ["link", "type_text", "fields_table", "cell"]


def link(ref: str) -> str:
    """A link to the section of the object a ``$ref`` names (``#/$defs/Name``,
    ``#/components/schemas/Name``): each is a heading ``Name`` of the same page."""
    name = ref.rsplit("/", 1)[-1]
    return f"[{name}](#{name.lower()})"


def _is_duration(schema: dict[str, Any]) -> bool:
    """A duration's text form (``90s``): the schema gives examples for it alone."""
    return schema.get("type") == "string" and "examples" in schema


def type_text(schema: dict[str, Any]) -> str:
    """What a value may be, in a few words, with links to the objects it holds."""
    if "$ref" in schema:
        return link(schema["$ref"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        if any(_is_duration(option) for option in options):
            # A duration's number form is its seconds: said once, by "duration".
            options = [option for option in options if option.get("type") != "number"]
        return " or ".join(type_text(option) for option in options)
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "array":
        return f"list of {type_text(schema.get('items', {}))}"
    if kind == "object" and "patternProperties" in schema:
        (value,) = schema["patternProperties"].values()
        return f"map of name → {type_text(value)}"
    if _is_duration(schema):
        return "duration (seconds, " + ", ".join(f"`{e}`" for e in schema["examples"]) + ")"
    if kind == "string" and "format" in schema:
        return f"string ({schema['format']})"
    return str(kind or "any")


#: JSON Schema keywords that bound a value, and how the reference says them.
_BOUNDS = {
    "minimum": "≥ {}",
    "exclusiveMinimum": "> {}",
    "maximum": "≤ {}",
    "minLength": "length ≥ {}",
    "maxLength": "length ≤ {}",
    "minItems": "items ≥ {}",
    "maxItems": "items ≤ {}",
}


#: Bounds this large are the database's integer range, not a rule a user meets.
_STORAGE_LIMIT = 2**53


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _bounds(schema: dict[str, Any]) -> str:
    found = [
        form.format(_number(schema[key]))
        for key, form in _BOUNDS.items()
        if key in schema
        and not (isinstance(schema[key], int | float) and schema[key] >= _STORAGE_LIMIT)
    ]
    if "pattern" in schema and "examples" not in schema:
        found.append(f"matches `{schema['pattern']}`")
    for option in schema.get("anyOf") or schema.get("oneOf") or ():
        found.extend(part for part in _bounds(option).split(", ") if part)
    return ", ".join(found)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def fields_table(definition: dict[str, Any]) -> str:
    required = set(definition.get("required", ()))
    rows = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, field in definition.get("properties", {}).items():
        if name in required:
            default = "**required**"
        elif "default" in field:
            default = f"`{json.dumps(field['default'])}`"
        else:
            default = ""
        cells = (
            f"`{name}`",
            type_text(field),
            default,
            _bounds(field),
            html.escape(field.get("description", ""), quote=False),
        )
        rows.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"
