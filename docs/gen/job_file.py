"""The job-file reference, from the JSON Schema that ``kernel jobs schema`` prints and
``kernel jobs apply`` validates with (kernel/spec/jobfile.py)."""

from __future__ import annotations

from typing import Any

from docs.gen.schema_text import fields_table, link
from kernel.spec.jobfile import job_file_schema

__all__ = ["job_file_page"]


def _one_of(definition: dict[str, Any]) -> str:
    """The "exactly one of these fields" rule of an object such as a schedule."""
    choices = [option["required"] for option in definition.get("oneOf", ())]
    if not choices:
        return ""
    names = " or ".join("`" + "`, `".join(fields) + "`" for fields in choices)
    return f"Exactly one of {names}.\n\n"


def job_file_page() -> str:
    schema = job_file_schema()
    defs: dict[str, dict[str, Any]] = schema["$defs"]
    payload_by_kind = {
        rule["if"]["properties"]["kind"]["const"]: rule["then"]["properties"]["payload"]["$ref"]
        for rule in defs["JobSpec"].get("allOf", ())
    }
    parts = [
        "# Job-file reference",
        "",
        "Generated from the JSON Schema (draft 2020-12) that validates job files: the one",
        "`celery -A APP kernel jobs schema` prints for editors. A job file is JSON, TOML or",
        "YAML; a duration is a number of seconds or text such as `90s`, `15m`, `1h30m`.",
        "See [Job files](../guides/job-files.md) for how to write and apply one.",
        "",
        "## The file",
        "",
        schema.get("description", ""),
        "",
        fields_table(schema),
        "## Payload by kind",
        "",
        "A job's `payload` follows its `kind`:",
        "",
        "| kind | payload |",
        "|---|---|",
        *(f"| `{kind}` | {link(ref)} |" for kind, ref in payload_by_kind.items()),
        "",
    ]
    order = ["JobSpec", *sorted(name for name in defs if name != "JobSpec")]
    for name in order:
        definition = defs[name]
        parts += [f"## {name}", "", _one_of(definition) + fields_table(definition)]
    return "\n".join(parts)


if __name__ == "__main__":
    print(job_file_page(), end="")
