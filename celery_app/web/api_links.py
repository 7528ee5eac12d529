"""OpenAPI links between the API's operations: which answer names an occurrence or a job,
and which operations take one.

A client (or a fuzzer's stateful phase) follows them from an answer to the next call: an
occurrence made by ``run-now`` to its page, its pause, its events; a job listed to its
preview, its ``run-now``. They are derived from the document itself: every operation whose
path holds ``{occurrence_id}`` or ``{job_id}`` takes one, plus the listed query filters.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_links"]

_OCCURRENCE_ACTIONS = ("pause", "resume", "requeue", "adjudicate", "cancel", "approve", "reject")

#: Where an answer holds an occurrence (a JSON pointer to it), by (method, path).
_OCCURRENCE_AT: dict[tuple[str, str], str] = {
    ("post", "/api/jobs/{job_id}/run-now"): "/occurrence",
    ("post", "/api/enqueue"): "/occurrence",
    ("get", "/api/occurrences"): "/0",
    ("get", "/api/occurrences/{occurrence_id}"): "",
    ("get", "/api/controls"): "/0",
    **{
        ("post", f"/api/occurrences/{{occurrence_id}}/{action}"): "/occurrence"
        for action in _OCCURRENCE_ACTIONS
    },
}
#: Where an answer holds a job's id, beyond the occurrences above (each names its job).
_JOB_ID_AT: dict[tuple[str, str], str] = {
    ("get", "/api/jobs"): "/0/id",
    ("get", "/api/jobs/{job_id}"): "/id",
    ("get", "/api/jobs/{job_id}/preview"): "/job_id",
}
#: Query parameters that filter by an occurrence or a job: (method, path) -> {name: noun}.
_QUERY_TAKERS: dict[tuple[str, str], dict[str, str]] = {
    ("get", "/api/occurrences"): {"job": "job"},
    ("get", "/api/events"): {"job": "job", "occurrence": "occurrence"},
}
_PATH_PARAMETER = {"occurrence": "occurrence_id", "job": "job_id"}


def add_links(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (an OpenAPI 3 document of this API) with ``links`` on each 200 answer
    that names an occurrence or a job, to every operation that takes one."""
    takers = _takers(document)
    for (method, path), operation in _operations(document):
        sources: dict[str, str] = {}
        if (method, path) in _OCCURRENCE_AT:
            at = _OCCURRENCE_AT[method, path]
            sources = {"occurrence": f"{at}/id", "job": f"{at}/job_id"}
        if (method, path) in _JOB_ID_AT:
            sources["job"] = _JOB_ID_AT[method, path]
        links = {
            name: {
                "operationId": target,
                "parameters": {parameter: f"$response.body#{pointer}"},
                "description": f"the {noun} this answer names",
            }
            for noun, pointer in sources.items()
            for name, target, parameter in takers[noun]
        }
        if links:
            operation["responses"]["200"]["links"] = links
    return document


def _operations(document: dict[str, Any]) -> list[tuple[tuple[str, str], dict[str, Any]]]:
    return [
        ((method, path), operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def _takers(document: dict[str, Any]) -> dict[str, list[tuple[str, str, str]]]:
    """Per noun, the operations that take one: (link name, operationId, parameter)."""
    takers: dict[str, list[tuple[str, str, str]]] = {noun: [] for noun in _PATH_PARAMETER}
    for key, operation in _operations(document):
        target = operation["operationId"]
        for noun, parameter in _PATH_PARAMETER.items():
            if f"{{{parameter}}}" in key[1]:
                takers[noun].append((target, target, f"path.{parameter}"))
        for name, noun in _QUERY_TAKERS.get(key, {}).items():
            takers[noun].append((f"{target}_by_{name}", target, f"query.{name}"))
    return takers
