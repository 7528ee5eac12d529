"""The plumbing every ``kernel`` command shares, in one place.

A command body receives an :class:`Env` (the Celery app, the kernel opened on first
use, the output mode) and hands :meth:`Env.emit` JSON-ready data plus a text
rendering. Errors become exit codes here and nowhere else:

* a :class:`~kernel.errors.KernelError` prints its stable code and exits 1 (2 for a
  setting refused by :class:`~celery_app.setting_values.ConfigInvalid`); under ``--json``
  stdout carries ``{"error": {"code", "message", "details"?}}``;
* Ctrl-C (SIGINT) ends any command with exit 130 and one line, no traceback;
* a usage error (bad option value, missing argument) exits 2, as click does; under
  ``--json`` it is ``{"error": {"code": "USAGE", ...}}`` on stdout as well, so a
  script parses one shape.

Text output is plain aligned columns, times in UTC ISO 8601. Everything printed for
people is stripped of control characters, so a hostile job id cannot drive the
terminal.
"""

from __future__ import annotations

import functools
import re
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import click

from celery_app.config import open_kernel
from celery_app.operations import format_json, iso, utc
from celery_app.setting_values import ConfigInvalid
from celery_app.settings import CONFIG_EXIT, INTERRUPTED_EXIT
from kernel import InvalidArgument, Kernel, KernelError, parse_duration

__all__ = [
    "Env",
    "Instant",
    "command",
    "interrupt_at_wait",
    "fields",
    "line",
    "table",
]

USAGE_EXIT = 2
ERROR_EXIT = 1
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_MAX_CELL = 120


class Env:
    """What a command body works with.

    Attributes:
        app: the Celery app ``celery -A`` loaded.
        json: ``--json`` was given.
    """

    def __init__(self, ctx: click.Context, as_json: bool) -> None:
        app = getattr(ctx.obj, "app", None)
        if app is None:
            raise click.UsageError("run it as `celery -A celery_app kernel ...`", ctx=ctx)
        self.app = app
        self.json = as_json
        self._ctx = ctx
        self._kernel: Kernel | None = None
        try:
            # As `celery worker` does (from the working directory): the app's
            # `imports`/`include`, so its tasks and their settings are known here too.
            app.loader.import_default_modules()
        except ImportError as exc:
            self.fail(InvalidArgument("imports", f"cannot import a module the app lists: {exc}"))

    @property
    def kernel(self) -> Kernel:
        """The configured kernel, opened once per command and closed when it ends.

        The CLI never migrates on the side: an old or empty schema is refused with
        ``SCHEMA_UNKNOWN`` and a pointer to ``kernel migrate``.
        """
        if self._kernel is None:
            self._kernel = open_kernel(self.app, migrate=False)
            self._ctx.call_on_close(self._kernel.close)
        return self._kernel

    def emit(self, data: Any, text: Callable[[], str], *, one_line: bool = False) -> None:
        """Print ``data`` as JSON under ``--json``, else the text ``text()`` renders.

        ``one_line`` prints compact JSON, for a process that goes on printing (JSON Lines).
        """
        click.echo(format_json(data, indent=None if one_line else 2) if self.json else text())

    def usage(self, message: str) -> NoReturn:
        """Refuse the command's arguments as click's usage errors are refused (exit 2)."""
        if self.json:
            _usage_json(message)
        raise click.UsageError(message, ctx=self._ctx)

    def fail(self, exc: KernelError) -> NoReturn:
        """Print a refusal with its stable code and exit 1 (2 for a configuration error)."""
        if self.json:
            click.echo(format_json({"error": exc.to_dict()}, indent=2))
        else:
            click.echo(f"Error {exc.code}: {_printable(exc.message)}", err=True)
            request_id = exc.details.get("request_id")
            if request_id:
                click.echo(f"request id: {_printable(str(request_id))}", err=True)
        raise click.exceptions.Exit(CONFIG_EXIT if isinstance(exc, ConfigInvalid) else ERROR_EXIT)


class KernelCommand(click.Command):
    """A click command whose usage errors keep the ``--json`` error shape."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        wants_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if not wants_json:
                raise
            _usage_json(exc.format_message())


def _usage_json(message: str) -> NoReturn:
    click.echo(format_json({"error": {"code": "USAGE", "message": message}}, indent=2))
    raise click.exceptions.Exit(USAGE_EXIT) from None


def command(
    name: str, group: click.Group | None = None
) -> Callable[[Callable[..., None]], click.Command]:
    """Make ``body(env, **params)`` the command ``name`` (added to ``group`` if given).

    The command gains ``--json``; a :class:`~kernel.errors.KernelError` from the body
    is printed with its code and exits 1. The body's docstring is the help.
    """

    def decorate(body: Callable[..., None]) -> click.Command:
        @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
        @click.pass_context  # type: ignore[arg-type]
        @functools.wraps(body)
        def run(ctx: click.Context, as_json: bool, **params: Any) -> None:
            env = Env(ctx, as_json)
            try:
                body(env, **params)
            except KernelError as exc:
                env.fail(exc)
            except KeyboardInterrupt:
                click.echo("interrupted", err=True)
                raise click.exceptions.Exit(INTERRUPTED_EXIT) from None

        cmd = click.command(name, cls=KernelCommand)(run)
        if group is not None:
            group.add_command(cmd)
        return cmd

    return decorate


@contextmanager
def interrupt_at_wait() -> Iterator[Callable[[float], None]]:
    """A follow loop's wait between polls, where Ctrl-C ends the loop (KeyboardInterrupt).

    A Ctrl-C that arrives during a read is kept until the read is done and raised at the
    next wait: raised inside the driver, it would end the command as a storage error
    (exit 1) instead of an interruption (exit 130).
    """
    asked = waiting = False

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal asked
        asked = True
        if waiting:
            raise KeyboardInterrupt

    def wait(seconds: float) -> None:
        nonlocal waiting
        if asked:
            raise KeyboardInterrupt
        waiting = True
        try:
            time.sleep(seconds)
        finally:
            waiting = False
        if asked:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield wait
    finally:
        signal.signal(signal.SIGINT, previous)


class Instant(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 date-time (without an offset it is read as UTC), ``now``, or a time
    relative to now: ``-5m``, ``+1h30m``, ``-90`` (seconds)."""

    name = "TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return utc(value)
        given = str(value).strip()
        if given.lower() == "now":
            return datetime.now(UTC)
        if given[:1] in ("-", "+"):
            try:
                seconds = parse_duration(given[1:], "time")
            except InvalidArgument:
                pass
            else:
                sign = -1 if given[0] == "-" else 1
                try:
                    return datetime.now(UTC) + timedelta(seconds=sign * seconds)
                except OverflowError:
                    self.fail(f"{value!r} is outside the calendar (years 1-9999)", param, ctx)
        try:
            moment = datetime.fromisoformat(given)
        except ValueError:
            self.fail(
                f"{value!r} is not a time: ISO 8601 (e.g. 2026-11-29T12:00:00Z), now, "
                "or relative to now (-5m, +1h)",
                param,
                ctx,
            )
        try:
            return utc(moment)
        except InvalidArgument as exc:
            self.fail(exc.message, param, ctx)


def _printable(text: str) -> str:
    """Escape control characters and lone surrogates (``\\x1b`` and the like)."""
    return _UNPRINTABLE.sub(
        lambda m: m.group().encode("unicode_escape", "backslashreplace").decode(), text
    )


def _cell(value: Any, limit: int | None = _MAX_CELL) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return iso(value) or "-"
    if isinstance(value, dict | list):
        value = format_json(value)
    text = _printable(str(value)).replace("\n", "\\n").replace("\t", " ")
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    empty: str = "(none)",
    full_last: bool = False,
) -> str:
    """Rows as left-aligned columns under upper-case headers; ``empty`` when there are none.

    Cells are cut at 120 characters, except the last column's with ``full_last``.
    """
    cells = [
        [
            _cell(value, None if full_last and i == len(row) - 1 else _MAX_CELL)
            for i, value in enumerate(row)
        ]
        for row in rows
    ]
    if not cells:
        return empty
    widths = [max(len(header), *(len(row[i]) for row in cells)) for i, header in enumerate(headers)]
    lines = [[header.upper() for header in headers], *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def line(values: Iterable[Any]) -> str:
    """One unaligned row, for output that streams."""
    return "  ".join(_cell(value) for value in values)


def fields(pairs: Iterable[tuple[str, Any]], *, full_last: bool = False) -> str:
    """``name  value`` lines, names aligned, for one record; values are cut at 120
    characters, except the last one's with ``full_last`` (a sentence for a person)."""
    pairs = list(pairs)
    items = [
        (name, _cell(value, None if full_last and i == len(pairs) - 1 else _MAX_CELL))
        for i, (name, value) in enumerate(pairs)
    ]
    width = max((len(name) for name, _ in items), default=0)
    return "\n".join(f"{name.ljust(width)}  {value}".rstrip() for name, value in items)
