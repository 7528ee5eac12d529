"""Job health on the command line: ``doctor``'s timeout check, ``jobs list`` health fields."""

from __future__ import annotations

import pytest
from cli.support import define

from kernel import Kernel


def _timeouts(cli) -> dict[str, str]:
    return next(c for c in cli("doctor", "--json").json()["checks"] if c["name"] == "timeouts")


def test_doctor_lists_jobs_without_a_timeout(
    cli, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    define(kernel, "bounded", timeout="10m")
    define(kernel, "open-b")
    define(kernel, "open-a")
    check = _timeouts(cli)
    assert check["status"] == "warn"
    assert "jobs without a timeout may run forever: open-a, open-b;" in check["detail"]
    assert "KERNEL_DEFAULT_TIMEOUT" in check["detail"]

    monkeypatch.setenv("KERNEL_DEFAULT_TIMEOUT", "15m")
    check = _timeouts(cli)
    assert check["status"] == "ok"
    assert check["detail"] == (
        "jobs without a timeout run at most kernel_default_timeout (900s): open-a, open-b"
    )


@pytest.mark.parametrize("value", ["soon", "0", "-5m"])
def test_a_bad_default_timeout_is_refused_naming_its_variable(
    cli, kernel: Kernel, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KERNEL_DEFAULT_TIMEOUT", value)
    result = cli("doctor", "--json")
    assert result.code == 1
    [settings] = result.json()["checks"]
    assert settings["status"] == "fail"
    assert settings["detail"].startswith(f"KERNEL_DEFAULT_TIMEOUT={value!r}: expected a duration")
