"""The command-line reference, from the ``kernel`` click group itself: every command, its
arguments and options with their help, as ``celery -A APP kernel ... --help`` shows them."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator

import click

from celery_app.cli import kernel

__all__ = ["cli_page"]

#: How a user starts the group: through Celery, with their app.
_PROG = "celery -A APP kernel"


def _walk(
    command: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Command, click.Context]]:
    """``command`` and every command under it, depth first, by name."""
    yield command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx))


def _markdown(text: str) -> str:
    """Click help as Markdown: reST literals become code, ``\\b`` paragraph marks go."""
    text = inspect.cleandoc(text).replace("\b\n", "")
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _cell(text: str) -> str:
    return _markdown(text).replace("|", "\\|").replace("\n", " ")


def _options(command: click.Command, ctx: click.Context) -> str:
    rows = ["| option | value | help |", "|---|---|---|"]
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden or param.name == "help":
            continue
        names = ", ".join(f"`{name}`" for name in (*param.opts, *param.secondary_opts))
        record = param.get_help_record(ctx)
        # Click's own help line, with the default and range it adds in brackets.
        help_text = record[1] if record else ""
        rows.append(f"| {names} | {_value(param, ctx)} | {_cell(help_text)} |")
    return "\n".join(rows) + "\n"


def _value(option: click.Option, ctx: click.Context) -> str:
    if option.is_flag:
        return ""
    if isinstance(option.type, click.Choice):
        value = " or ".join(f"`{choice}`" for choice in option.type.choices)
    else:
        value = f"`{option.make_metavar(ctx)}`"
    return value + (" (repeatable)" if option.multiple else "")


def _arguments(command: click.Command, ctx: click.Context) -> list[str]:
    return [
        f"`{param.make_metavar(ctx)}`"
        for param in command.params
        if isinstance(param, click.Argument)
    ]


def _section(command: click.Command, ctx: click.Context) -> str:
    path = ctx.command_path
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    parts = [f"## {path.removeprefix(_PROG).strip() or 'kernel'}", "", f"```\n{usage}\n```", ""]
    if command.help:
        parts += [_markdown(command.help), ""]
    arguments = _arguments(command, ctx)
    if arguments:
        parts += ["Arguments: " + ", ".join(arguments) + ".", ""]
    if isinstance(command, click.Group):
        names = command.list_commands(ctx)
        parts += ["Commands: " + ", ".join(f"`{name}`" for name in names) + ".", ""]
    else:
        parts += [_options(command, ctx)]
    return "\n".join(parts)


def cli_page() -> str:
    root = click.Context(kernel, info_name=_PROG)
    sections = [_section(command, ctx) for command, ctx in _walk(kernel, root)]
    return "\n".join(
        [
            "# Command-line reference",
            "",
            "Generated from the `kernel` command group (`celery_app/cli/`): what",
            f"`{_PROG} COMMAND --help` prints, for every command. `APP` is your Celery",
            "app (`celery_app` for the ready-made one). Every command takes `--json`; exit",
            "codes are in [Operating it](../guides/operating.md#when-things-go-wrong).",
            "",
            *sections,
        ]
    )


if __name__ == "__main__":
    print(cli_page(), end="")
