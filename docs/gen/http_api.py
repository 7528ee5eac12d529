"""The HTTP API reference, from the OpenAPI document ``kernel web`` serves at
``/openapi.json`` (the FastAPI app of celery_app/web)."""

from __future__ import annotations

from typing import Any, cast

from celery_app.web.app import create_app
from celery_app.web.context import WebContext
from docs.gen.schema_text import cell, fields_table, link, type_text

__all__ = ["http_api_page"]


def openapi_document() -> dict[str, Any]:
    """What ``GET /openapi.json`` answers. Building it reads only the routes, so the app
    is made without a kernel or users (no request is ever served)."""
    return create_app(cast(WebContext, None)).openapi()


def _parameters(operation: dict[str, Any]) -> str:
    parameters = operation.get("parameters", [])
    if not parameters:
        return ""
    rows = ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
    for parameter in parameters:
        schema = parameter.get("schema", {})
        default = f" (default `{schema['default']}`)" if "default" in schema else ""
        cells = (
            f"`{parameter['name']}`",
            parameter["in"],
            type_text(schema) + default,
            "yes" if parameter.get("required") else "",
            parameter.get("description", ""),
        )
        rows.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _body(operation: dict[str, Any]) -> str:
    body = operation.get("requestBody")
    if not body:
        return ""
    schema = body["content"]["application/json"]["schema"]
    required = "required" if body.get("required") else "optional"
    return f"JSON body ({required}): {type_text(schema)}.\n"


def _operation(path: str, method: str, operation: dict[str, Any]) -> str:
    summary = operation.get("summary", "")
    parts = [f"### {method.upper()} {path}", "", summary, ""]
    if operation.get("description"):
        parts += [operation["description"], ""]
    parts += [_parameters(operation), _body(operation)]
    return "\n".join(part for part in parts if part is not None)


def _responses(document: dict[str, Any]) -> str:
    """The answers every operation shares (the document lists them on each one)."""
    seen: dict[str, str] = {}
    for operations in document["paths"].values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                seen.setdefault(status, response.get("description", ""))
    rows = ["| status | meaning |", "|---|---|"]
    rows += [f"| {status} | {cell(text)} |" for status, text in sorted(seen.items())]
    return "\n".join(rows) + "\n"


def _schema_section(name: str, schema: dict[str, Any]) -> str:
    text = fields_table(schema) if "properties" in schema else type_text(schema) + "\n"
    return f"### {name}\n\n{text}"


def http_api_page() -> str:
    document = openapi_document()
    info = document["info"]
    reads: list[str] = []
    actions: list[str] = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            section = _operation(path, method, operation)
            (reads if method == "get" else actions).append(section)
    schemas = document.get("components", {}).get("schemas", {})
    return "\n".join(
        [
            "# HTTP API reference",
            "",
            f"Generated from the OpenAPI {document['openapi']} document (`{info['title']}`",
            f"version {info['version']}) that `kernel web` serves at `/openapi.json`. See",
            "[Console and HTTP API](../guides/console-and-api.md) for users, roles, limits",
            "and the console.",
            "",
            info.get("description", ""),
            "",
            "## Answers",
            "",
            "Errors are " + link("#/ErrorBody") + ' objects: `{"error": {"code",',
            '"message"}}`, with one of these statuses:',
            "",
            _responses(document),
            "## Reading",
            "",
            *reads,
            "## Actions",
            "",
            "Each answers what the matching `kernel` command prints with `--json`.",
            "",
            *actions,
            "## Schemas",
            "",
            *(_schema_section(name, schema) for name, schema in schemas.items()),
        ]
    )


if __name__ == "__main__":
    print(http_api_page(), end="")
