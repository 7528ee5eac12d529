"""Job files: any bad input gives a clear error naming file and field, never a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli.support import job, write
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from beat_schedule import jobfiles as files
from beat_schedule.jobfiles import JobFileInvalid, load_job_file, validate_job_file
from kernel import Kernel


def _refusal(path: Path) -> JobFileInvalid:
    with pytest.raises(JobFileInvalid) as caught:
        validate_job_file(path)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.details["file"] == str(path)
    assert caught.value.message.startswith(f"{path}: ")
    return caught.value


@pytest.mark.parametrize(
    ("name", "text", "field", "says"),
    [
        (
            "a.json",
            '{"jobs": [\n  {"id": "x",}\n]}',
            "line 2, column 14",
            "Expecting property name",
        ),
        ("a.json", '{"jobs": [], "jobs": []}', 'key "jobs"', "duplicate key"),
        ("a.toml", "[[jobs]]\nid = 'x'\nid = 'y'\n", "syntax error", "line 3"),
        ("a.yaml", "jobs:\n  - id: x\n    kind: [\n", "line 4, column 1", "syntax error"),
        ("a.yaml", "jobs:\n  - id: x\n    id: y\n", "line 3, column 5", "duplicate key 'id'"),
        (
            "a.yml",
            "base: &b {id: x}\njobs: [*b]\n",
            "line 2, column 8",
            "aliases (*name) are not supported",
        ),
        (
            "a.yaml",
            "jobs:\n  - id: \x07\n",
            "line 2, column 9",
            "special characters are not allowed",
        ),
        ("a.json", "[1, 2]", "file", 'must hold an object: {"jobs": [ ... ]}'),
        ("a.json", '{"jobs": [], "extra": 1}', "extra", "unknown field"),
        ("a.json", '{"job": []}', "job", "unknown field"),
        ("a.json", "{}", "jobs", "is required"),
        ("a.yaml", "jobs: {id: x}\n", "jobs", "must be an array of jobs"),
        ("a.yaml", "jobs: [x]\n", "jobs[0]", "must be an object"),
        ("a.json", "[" * 100_000, "file", "nests too deeply"),
        ("a.json", '{"jobs": [{"id": 1' + "0" * 5000 + "}]}", "file", "syntax error"),
        ("a.ini", "[jobs]\n", "file", "use a .json, .toml, .yaml or .yml file"),
    ],
)
def test_syntax_and_shape_errors_say_where(
    tmp_path: Path, name: str, text: str, field: str, says: str
) -> None:
    error = _refusal(write(tmp_path / name, text))
    assert error.details["field"] == field
    assert says in error.message


def test_unreadable_and_undecodable_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "cannot be read" in _refusal(tmp_path / "missing.json").message
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("jobs: [{id: caf\xe9}]".encode("latin-1"))
    assert "is not UTF-8 (byte 15)" in _refusal(latin).message
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
    assert (
        "is larger than 10 bytes" in _refusal(write(tmp_path / "big.json", '{"jobs": []}')).message
    )


def test_a_bom_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"jobs": [job("a")]}).encode())
    assert [spec.id for spec in validate_job_file(path)] == ["a"]


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"kind": 7}, "kind", "must be a string"),
        ({"enabled": "yes"}, "enabled", "must be true or false"),
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"schedule": {"cron": "0 25 * * *"}}, "schedule.cron", "not a valid cron expression"),
        (
            {"schedule": {"cron": "0 2 * * *", "timezone": "Europe/Atlantis"}},
            "schedule.timezone",
            "unknown IANA",
        ),
        (
            {"payload": {"callable": "os.path:join", "args": ["x" * 70_000]}},
            "payload",
            "the limit is 65536",
        ),
        ({"queue": "q\u0000"}, "queue", "control character (U+0000)"),
        ({"retry": {"backoff": "soon"}}, "retry.backoff", "must be a duration"),
    ],
)
def test_each_invalid_field_is_named(
    tmp_path: Path, fields: dict[str, Any], field: str, says: str
) -> None:
    error = _refusal(
        write(tmp_path / "jobs.json", json.dumps({"jobs": [job("ok"), job("bad", **fields)]}))
    )
    assert error.details["field"] == f"jobs[1].{field}"
    assert says in error.message
    assert "jobs[1] ('bad')" in error.message


def test_toml_datetimes_and_yaml_dates_are_judged_not_crashed_on(tmp_path: Path) -> None:
    toml = (
        "[[jobs]]\nid='a'\nkind='callable'\nschedule={at=2030-01-01T00:00:00Z}\n"
        "payload={callable='os.path:join', args=[2030-01-01]}\n"
    )
    assert _refusal(write(tmp_path / "a.toml", toml)).details["field"] == "jobs[0].payload.args[0]"
    local = toml.replace("2030-01-01T00:00:00Z", "2030-01-01T00:00:00").replace(
        "args=[2030-01-01]", "args=[]"
    )
    assert "must carry a UTC offset" in _refusal(write(tmp_path / "b.toml", local)).message
    at = toml.replace("args=[2030-01-01]", "args=[]")
    assert validate_job_file(write(tmp_path / "c.toml", at))[0].schedule == {
        "at": "2030-01-01T00:00:00Z"
    }
    # YAML 1.2 has no date type: an unquoted date is the text written.
    assert load_job_file(write(tmp_path / "d.yaml", "jobs: [{id: 2030-01-01}]"))[0]["id"] == (
        "2030-01-01"
    )


def test_yaml_is_read_by_yaml_1_2(tmp_path: Path) -> None:
    text = (
        "jobs:\n"
        "  - {id: parent, kind: callable, payload: {callable: 'os.path:join'}, schedule: null}\n"
        "  - id: child\n"
        "    kind: callable\n"
        "    payload: {callable: 'os.path:join', args: [yes, no, off, on, 012, 0o12, 1:30, 1e3,"
        " true, ~]}\n"
        "    schedule: null\n"
        "    after: {job: parent, on: failure}\n"
        "    notify: {on: [dead_letter], task: alerts.failed}\n"
    )
    jobs = validate_job_file(write(tmp_path / "a.yaml", text))
    child = jobs[1]
    assert child.after is not None and child.after.on == "failure"
    assert child.notify is not None and child.notify.on == ["dead_letter"]
    assert child.payload["args"] == ["yes", "no", "off", "on", 12, 10, "1:30", 1000.0, True, None]


def test_yaml_written_by_the_kernel_reads_back_the_same_in_yaml_1_1_and_1_2() -> None:
    from beat_schedule import yaml_dialect

    data = {"on": ["yes", "off", "012", "0o12", "1e3", "1:30", "2030-01-01", "~", "<<"], "n": 12}
    text = yaml_dialect.dump(data)
    assert yaml.load(text, Loader=yaml_dialect.StrictLoader) == data  # noqa: S506
    assert yaml.safe_load(text) == data


# --- fuzz: whatever the file holds, the CLI answers with a code, never a traceback ----------------

_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
_VALID: dict[str, list[Any]] = {
    "id": ["nightly", "a.b:c-1", "", "x" * 200, "bad id", "caf\u00e9"],
    "kind": ["shell", "callable", "task", "http", "custom.kind", "Shell"],
    "payload": [
        {"argv": ["/bin/true"]},
        {"callable": "os.path:join"},
        {"task": "t"},
        {"url": "https://example.com", "method": "POST", "json": {"a": 1}},
        {"argv": []},
        {},
    ],
    "schedule": [
        {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
        {"every": "30s"},
        {"in": "15m"},
        {"at": "2030-01-01T00:00:00+02:00"},
        None,
        {"cron": "61 * * * *"},
        {"every": 0},
        {"cron": "* * * * *", "timezone": "Mars/Base"},
        {"every": "1s", "at": "x"},
    ],
    "enabled": [True, False],
    "queue": ["celery", "q\u0007"],
    "max_attempts": [1, 3, 0, 10**30],
    "retry": [{"backoff": "30s", "factor": 2, "max": "1h", "jitter": 0.1}, {"max": "1s"}],
    "lease": ["60s", "1s", 1e308],
    "timeout": ["30m", None, "-1m"],
    "overlap": ["skip", "allow", "queue", "replace", "sometimes"],
    "max_queued": [25, -1],
    "catchup": [{"policy": "latest", "window": "1h"}, {"policy": "all"}, {"policy": "never"}],
    "delivery": ["at-least-once", "at-most-once", "exactly-once"],
    "pool": [None, "db"],
    "dst": [{"gap": "shift_forward", "fold": "first"}, {"gap": "ignore"}],
    "after": [None, {"job": "nightly", "on": "success"}, {"job": "other", "condition": "regex:("}],
    "colour": ["blue"],
}


@st.composite
def _job(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(_junk)
    names = draw(st.lists(st.sampled_from(sorted(_VALID)), unique=True, max_size=len(_VALID)))
    base = {"id": "j", "kind": "callable", "payload": {"callable": "os.path:join"}}
    for name in names:
        base[name] = draw(st.sampled_from(_VALID[name]) | _junk)
    return base


def _toml(value: Any) -> str:
    """Inline TOML for a JSON-like value; None (TOML has no null) stays a syntax error."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return "null" if value is None else json.dumps(value)


def _render(fmt: str, document: Any) -> str:
    if fmt == "json":
        return json.dumps(document)
    if fmt == "yaml":
        return yaml.safe_dump(document, allow_unicode=True)
    if not isinstance(document, dict):
        return _toml(document)
    return "\n".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in document.items()) + "\n"


def _check_answer(cli, kernel: Kernel, path: Path) -> None:
    events_before = len(kernel.events(limit=1000))
    result = cli("jobs", "apply", str(path), "--json")
    assert result.code in (0, 1), result.out
    event(f"exit {result.code}")
    answer = json.loads(result.out)
    if result.code == 1:
        error = answer["error"]
        assert error["code"] == "INVALID_ARGUMENT"
        assert error["details"]["file"] == str(path)
        assert error["details"]["field"]
        if "applied" not in error["details"]:  # refused before any write
            assert len(kernel.events(limit=1000)) == events_before
    text = cli("jobs", "apply", str(path))
    assert text.code == result.code
    if text.code == 1:
        assert text.err.startswith("Error INVALID_ARGUMENT: ")


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(["json", "yaml", "toml"]),
    document=st.one_of(st.lists(_job(), max_size=4).map(lambda jobs: {"jobs": jobs}), _junk),
)
def test_fuzzed_job_files_never_raise(
    cli, kernel: Kernel, tmp_path: Path, fmt: str, document: Any
) -> None:
    path = tmp_path / f"fuzz.{fmt}"
    path.write_text(_render(fmt, document), encoding="utf-8")
    _check_answer(cli, kernel, path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(["json", "yaml", "yml", "toml"]),
    content=st.binary(max_size=200) | st.text(max_size=200),
)
def test_fuzzed_raw_bytes_never_raise(
    cli, kernel: Kernel, tmp_path: Path, fmt: str, content: bytes | str
) -> None:
    path = tmp_path / f"raw.{fmt}"
    path.write_bytes(
        content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass")
    )
    _check_answer(cli, kernel, path)
