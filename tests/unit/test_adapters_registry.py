"""Adapter discovery through real entry points (the project and throw-away distributions)."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from adapters.base import CHECKPOINT_V1, NO_RUNTIME_CONTROL, Adapter
from adapters.callable import CallableAdapter
from adapters.http import HttpAdapter
from adapters.registry import load_adapters
from adapters.shell import ShellAdapter
from adapters.task import TaskAdapter
from adapters.watchdog import WatchdogAdapter
from kernel.errors import InvalidArgument

PLUGIN_SOURCE = """
from adapters.base import BaseAdapter


class Echo(BaseAdapter):
    kind = "echo"

    def execute(self, ctx):
        return ctx.occurrence.payload


class Shadow(Echo):
    kind = "shell"


def exploding(app=None):
    raise RuntimeError("plug-in bug")


def not_an_adapter(app=None):
    return object()
"""


@pytest.fixture
def install_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[dict[str, str]], None]]:
    """Install a distribution whose entry points map names to ``plugin:<attr>``."""
    module = f"adapter_plugin_{uuid.uuid4().hex}"

    def install(entry_points: dict[str, str]) -> None:
        (tmp_path / f"{module}.py").write_text(PLUGIN_SOURCE)
        dist_info = tmp_path / "adapter_plugin-1.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: adapter-plugin\n")
        lines = "\n".join(f"{name} = {module}:{attr}" for name, attr in entry_points.items())
        (dist_info / "entry_points.txt").write_text(f"[celery_kernel.adapters]\n{lines}\n")
        monkeypatch.syspath_prepend(str(tmp_path))

    yield install
    sys.modules.pop(module, None)


def test_the_five_builtins_are_registered_with_their_declarations() -> None:
    app = object()

    adapters = load_adapters(app=app)

    assert {kind: type(adapter) for kind, adapter in adapters.items()} == {
        "task": TaskAdapter,
        "callable": CallableAdapter,
        "shell": ShellAdapter,
        "http": HttpAdapter,
        "watchdog": WatchdogAdapter,
    }
    assert all(isinstance(adapter, Adapter) for adapter in adapters.values())
    assert {kind: adapter.runtime_control for kind, adapter in adapters.items()} == {
        "task": CHECKPOINT_V1,
        "callable": CHECKPOINT_V1,
        "shell": NO_RUNTIME_CONTROL,
        "http": NO_RUNTIME_CONTROL,
        "watchdog": NO_RUNTIME_CONTROL,
    }
    assert adapters["task"].app is app  # type: ignore[attr-defined]


def test_a_third_party_adapter_is_loaded_beside_the_builtins(
    install_plugin: Callable[[dict[str, str]], None],
) -> None:
    install_plugin({"echo": "Echo"})

    adapters = load_adapters()

    assert sorted(adapters) == ["callable", "echo", "http", "shell", "task", "watchdog"]
    assert adapters["echo"].runtime_control == NO_RUNTIME_CONTROL


def test_broken_third_party_entry_points_are_logged_and_skipped(
    install_plugin: Callable[[dict[str, str]], None], caplog: pytest.LogCaptureFixture
) -> None:
    install_plugin({"missing": "NoSuchThing", "exploding": "exploding", "odd": "not_an_adapter"})

    with caplog.at_level(logging.ERROR, logger="adapters.registry"):
        adapters = load_adapters()

    assert sorted(adapters) == ["callable", "http", "shell", "task", "watchdog"]
    skipped = {record.entry_point: record for record in caplog.records}  # type: ignore[attr-defined]
    assert sorted(skipped) == ["exploding", "missing", "odd"]
    assert {record.action for record in skipped.values()} == {"adapter_load_failed"}  # type: ignore[attr-defined]
    assert "plug-in bug" in str(skipped["exploding"].exc_info[1])  # type: ignore[index]


def test_a_second_adapter_for_a_kind_is_refused(
    install_plugin: Callable[[dict[str, str]], None],
) -> None:
    install_plugin({"my-shell": "Shadow"})

    with pytest.raises(InvalidArgument, match="'shell'") as caught:
        load_adapters()

    assert "adapters.shell:ShellAdapter" in caught.value.message
    assert "my-shell" in caught.value.message
