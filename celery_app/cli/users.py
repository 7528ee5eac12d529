"""``kernel users add|list|remove``: who may use the console and the HTTP API.

These edit the users file (``KERNEL_USERS_FILE``); the CLI itself asks nobody's
permission: it is an admin tool for whoever holds the database credentials and can
write that file.
"""

from __future__ import annotations

import click

from celery_app.cli.output import Env, command, fields, table
from celery_app.web.users import Role, UserStore, users_file

__all__ = ["users"]

users = click.Group("users", help="Console and API users: add (prints a token), list, remove.")
_ROLES = [role.label for role in Role]


@command("add", users)
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(_ROLES), help="What the user may do.")
def _add(env: Env, name: str, role: str) -> None:
    """Add a user (or give an existing one a new token and role) and print the token.

    The token is shown once; the file keeps only its scrypt hash. viewer reads,
    operator also pauses, resumes, cancels, runs now, requeues and adjudicates, admin
    also enables, disables and deletes jobs and prunes history.
    """
    store = UserStore(users_file())
    user, token = store.add(name, Role.parse(role))
    env.emit(
        {"user": user.name, "role": user.role.label, "token": token},
        lambda: (
            fields([("user", user.name), ("role", user.role.label), ("token", token)])
            + f"\n(shown once; stored hashed in {store.path})"
        ),
    )


@command("list", users)
def _list(env: Env) -> None:
    """List users and their roles (tokens are never shown again)."""
    found = UserStore(users_file()).list()
    env.emit(
        [{"user": u.name, "role": u.role.label} for u in found],
        lambda: table(
            ("user", "role"), ((u.name, u.role.label) for u in found), empty="(no users)"
        ),
    )


@command("remove", users)
@click.argument("name")
def _remove(env: Env, name: str) -> None:
    """Remove a user: their token and console sessions stop working at once."""
    UserStore(users_file()).remove(name)
    env.emit({"removed": name}, lambda: f"user {name} removed")
