"""``kernel web``: serve the operator console and the HTTP API with uvicorn."""

from __future__ import annotations

import click

from celery_app.cli.output import Env
from celery_app.shell import celery_command
from celery_app.web.app import create_app, serve
from celery_app.web.auth import Sessions, SignInLimiter
from celery_app.web.context import WebContext
from celery_app.web.users import UserStore, users_file
from celery_app.web_settings import WebSettings
from kernel import KernelError

__all__ = ["web"]


@click.command("web")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True)
@click.pass_context
def web(ctx: click.Context, host: str, port: int) -> None:
    """Serve the console (/) and the JSON API (/api/, contract at /openapi.json).

    Users and tokens come from KERNEL_USERS_FILE (`kernel users add`). Put it behind
    a TLS-terminating proxy before binding anything but loopback (cookies are then
    marked Secure unless KERNEL_WEB_SECURE_COOKIES=false).
    """
    env = Env(ctx, as_json=False)
    try:
        settings = WebSettings.from_app(env.app, host)
        kernel = env.kernel
        users = UserStore(users_file())
        known = users.list()
    except KernelError as exc:
        env.fail(exc)
    if not known:
        click.echo(
            f"no users in {users.path}: add one with "
            f"`{celery_command(env.app, 'kernel', 'users', 'add')} NAME --role admin`",
            err=True,
        )
    limiter = SignInLimiter(settings.sign_in_limit)
    app = create_app(WebContext(env.app, kernel, users, Sessions(), settings, limiter))
    click.echo(f"console and API on http://{host}:{port}/ (users: {users.path})", err=True)
    serve(app, host, port, settings)
