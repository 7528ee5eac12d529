"""Engines for the kernel: bounded waits, SQLite pragmas and write locks, schema checks, migration.

Every wait on the database is bounded, so a command, a worker start or a Beat tick
gives up with ``STORAGE_UNAVAILABLE`` instead of hanging: PostgreSQL gets a connect
timeout (covering a server that accepts the connection and never answers) and a
statement timeout; SQLite a busy timeout.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from kernel.db.driver import DriverStatement, finish, send
from kernel.db.schema_shape import SchemaDrift, compare, expected_shape, live_shape
from kernel.errors import InvalidArgument, SchemaUnknown
from kernel.redaction import masked_url

__all__ = [
    "ADVISORY_XACT_LOCK",
    "advisory_xact_lock",
    "anchored_sqlite_url",
    "begin_write",
    "create_kernel_engine",
    "make_private_dir",
    "end_write",
    "migrate",
    "schema_revision",
    "check_schema",
    "schema_drift",
    "HEAD_REVISION",
    "MIGRATE_COMMAND",
    "CONNECT_TIMEOUT_S",
    "STATEMENT_TIMEOUT_S",
]

SQLITE_SYNCHRONOUS = ("FULL", "NORMAL")
#: Defaults for PostgreSQL: seconds to establish a connection, and to run one statement.
CONNECT_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_S = 30.0
#: The command a schema refusal names; an application's CLI puts its own in its place.
MIGRATE_COMMAND = "celery -A celery_app kernel migrate"
_MIGRATION_LOCK = 0x4B45524E  # "KERN": the advisory lock key migrations take on PostgreSQL

# Each kernel transaction starts with one of these: on the driver, not through
# exec_driver_sql, whose set-up costs more than the BEGIN itself.
_BEGIN_READ = DriverStatement(sa.text("BEGIN"), "sqlite")
_BEGIN_WRITE = DriverStatement(sa.text("BEGIN IMMEDIATE"), "sqlite")


#: The schema revision this code needs: the newest in kernel/migrations/versions (a test
#: holds it to alembic's head). alembic itself is imported only to migrate or to name an
#: unknown revision: a worker on a current schema never loads it (~9 MB per process).
HEAD_REVISION = "0029"
_VERSION_TABLE = "alembic_version"


def _alembic_config() -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "kernel:migrations")
    return cfg


def create_kernel_engine(
    url: str,
    *,
    sqlite_synchronous: str = "FULL",
    busy_timeout_ms: int = 5_000,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    statement_timeout: float = STATEMENT_TIMEOUT_S,
    must_exist: bool = False,
    **engine_kwargs: Any,
) -> sa.Engine:
    """Create an engine configured for the kernel.

    SQLite gets WAL, ``synchronous=FULL`` (so a committed claim survives power
    loss; ``NORMAL`` is an opt-in), a busy timeout, and ``BEGIN IMMEDIATE`` for
    writes so contention waits for the lock instead of failing at COMMIT.
    PostgreSQL gets ``connect_timeout`` and ``statement_timeout`` (seconds; they
    also bound the pool's wait for a connection).

    Args:
        must_exist: refuse a SQLite file that does not exist instead of creating it
            (and its folder): for everything that is not meant to build a kernel.

    Raises:
        InvalidArgument: the URL, a timeout or the synchronous mode is not usable.
        SchemaUnknown: ``must_exist`` and there is no database file.
    """
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise InvalidArgument(
            "database_url",
            f"not a SQLAlchemy URL: {masked_url(url)!r} "
            "(e.g. sqlite:///var/kernel.db or postgresql+psycopg://user@host/db)",
        ) from exc
    try:
        parsed.get_dialect()
    except sa.exc.NoSuchModuleError as exc:
        raise InvalidArgument(
            "database_url",
            f"no SQLAlchemy driver {parsed.drivername!r}: use sqlite or postgresql+psycopg",
        ) from exc
    for name, seconds in (
        ("connect_timeout", connect_timeout),
        ("statement_timeout", statement_timeout),
    ):
        if not seconds > 0:
            raise InvalidArgument(name, f"must be a positive number of seconds, not {seconds!r}")
    if parsed.get_backend_name() == "sqlite":
        if must_exist:
            _require_sqlite_file(parsed)
        return _sqlite_engine(parsed, sqlite_synchronous, busy_timeout_ms, engine_kwargs)
    if parsed.get_backend_name() == "postgresql":
        engine_kwargs.setdefault("pool_pre_ping", True)
        engine_kwargs.setdefault("pool_timeout", connect_timeout)
        connect_args = {"prepare_threshold": None, **engine_kwargs.pop("connect_args", {})}
        # libpq takes whole seconds (0: wait for ever); the kernel prepares (db/prepared.py).
        connect_args.setdefault("connect_timeout", max(1, round(connect_timeout)))
        # Ours first: options the URL or caller gives (even a statement_timeout) come later and win.
        given = connect_args.get("options") or parsed.query.get("options") or ""
        ours = f"-c statement_timeout={int(statement_timeout * 1000)}"
        connect_args["options"] = f"{ours} {given}".strip()
        try:
            return sa.create_engine(parsed, connect_args=connect_args, **engine_kwargs)
        except ModuleNotFoundError as exc:  # the driver is an extra of the distribution
            raise InvalidArgument(
                "database_url",
                f"PostgreSQL needs its driver {exc.name!r}, which is not installed: "
                "pip install 'celery-kernel[postgres]' (it installs psycopg; name it in the "
                "URL as postgresql+psycopg://)",
            ) from None
    raise InvalidArgument(
        "database_url",
        f"unsupported database {parsed.get_backend_name()!r}: use sqlite or postgresql",
    )


def _require_sqlite_file(url: sa.URL) -> None:
    path = sqlite_file(url)
    if path is not None and not os.path.isfile(path):
        raise SchemaUnknown(
            f"no kernel database at {path}; create it with `{MIGRATE_COMMAND}`, "
            "or point KERNEL_DATABASE_URL at an existing kernel",
            revision=None,
            expected=HEAD_REVISION,
            path=path,
        )


def sqlite_file(url: sa.URL) -> str | None:
    """The file behind a SQLite URL (absolute); None in memory or for a ``file:`` URI."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database)


def anchored_sqlite_url(url: str, base: Path) -> str:
    """``url`` with a relative SQLite path made absolute against ``base``; any other URL
    (PostgreSQL, in memory, a ``file:`` URI, unparsable) unchanged."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is no number
        return url  # refused, with its reason, when an engine is made from it
    database = parsed.database
    if (
        parsed.get_backend_name() != "sqlite"
        or not database
        or database == ":memory:"
        or database.startswith("file:")
        or os.path.isabs(database)
    ):
        return url
    return parsed.set(database=str(base / database)).render_as_string(hide_password=False)


#: Modes of what the kernel creates: its data is readable by its owner only.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents, each one it creates mode 0700 (a folder
    that exists keeps its mode: ``kernel doctor`` reports one open to others)."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it first
            folder.mkdir(mode=PRIVATE_DIR_MODE)


def _create_private_file(path: str) -> None:
    """Create an empty SQLite file 0600 if there is none: SQLite gives its WAL and SHM
    files the database file's mode, so those are private too."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE))
    except FileExistsError:
        pass
    except OSError as exc:
        raise InvalidArgument(
            "database_url",
            f"cannot create the SQLite file {path}: {exc.strerror or exc}; "
            "choose a writable location",
        ) from exc


def _sqlite_engine(
    url: sa.URL, synchronous: str, busy_timeout_ms: int, engine_kwargs: dict[str, Any]
) -> sa.Engine:
    mode = synchronous.upper()
    if mode not in SQLITE_SYNCHRONOUS:
        raise InvalidArgument("sqlite_synchronous", f"must be one of {SQLITE_SYNCHRONOUS}")
    # A "file:..." URI (uri=true, e.g. mode=ro) is no path: mkdir would make ./file:/...
    path = sqlite_file(url)
    if path is not None:
        try:
            make_private_dir(Path(path).parent)
        except OSError as exc:
            raise InvalidArgument(
                "database_url",
                f"cannot create the folder of the SQLite file {path}: "
                f"{exc.strerror or exc}; choose a writable location",
            ) from exc
        _create_private_file(path)
    engine = sa.create_engine(url, **engine_kwargs)

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_conn: Any, _record: Any) -> None:
        # Python's sqlite3 would otherwise open transactions on its own terms.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if url.database and url.database != ":memory:":
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {mode}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        if conn.connection.dbapi_connection.in_transaction:  # type: ignore[union-attr]
            return  # begin_write's: SQLAlchemy's transaction joins it
        read_only = conn.get_execution_options().get("kernel_read_only")
        (_BEGIN_READ if read_only else _BEGIN_WRITE).execute(conn)

    return engine


def begin_write(conn: sa.Connection) -> None:
    """Begin a write transaction on the driver, outside SQLAlchemy's transaction, whose
    begin and commit machinery cost ~15 % of a claim+settle pair's CPU (bench/README,
    sessions 6 and 21): SQLite's ``BEGIN IMMEDIATE`` (as text on the kept cursor: a
    statement without parameters or rows needs none of DriverStatement's per-call work);
    on PostgreSQL nothing, as psycopg opens the transaction with its first statement
    (unless that statement is sent alone: ``Tx.alone``).

    A Core statement run inside still works: SQLAlchemy then begins its own transaction,
    which joins this one (SQLite's begin listener finds the driver in a transaction;
    psycopg's begin is its next statement), and :func:`end_write` ends both.
    """
    if conn.dialect.name == "sqlite":
        send(conn, "BEGIN IMMEDIATE", (), fetch=False)


def end_write(conn: sa.Connection, *, commit: bool) -> None:
    """COMMIT or ROLLBACK what :func:`begin_write` began (nothing to end: nothing sent)."""
    if conn.in_transaction():
        if commit:
            conn.commit()
        else:
            conn.rollback()
    elif conn.invalidated:  # a lost connection has nothing left to end
        return
    elif commit and conn.dialect.name == "sqlite":
        # Sent, not sqlite3's commit(), which ends nothing silently where SQLite already
        # rolled the transaction back (a full disk): COMMIT then fails, and says so.
        send(conn, "COMMIT", (), fetch=False)
    else:
        finish(conn, commit=commit)


#: Wait for PostgreSQL's advisory lock ``:key``, held until the transaction ends.
ADVISORY_XACT_LOCK = sa.text("SELECT pg_advisory_xact_lock(:key)")


def advisory_xact_lock(conn: sa.Connection, key: int) -> None:
    """Wait for PostgreSQL's advisory lock ``key``, held until the transaction ends."""
    conn.execute(ADVISORY_XACT_LOCK, {"key": key})


def schema_revision(conn: sa.Connection) -> str | None:
    """The alembic revision stamped in the database, or None for an empty database."""
    if not sa.inspect(conn).has_table(_VERSION_TABLE):
        return None
    revision = conn.execute(sa.text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalar()
    return None if revision is None else str(revision)


def check_schema(engine: sa.Engine) -> None:
    """Refuse to run on a database this code does not know.

    Raises:
        SchemaUnknown: not migrated, migrated by a newer release, foreign, or at this
            revision but with a table, column, index or CHECK missing or altered (the
            fingerprint of :mod:`kernel.db.schema_shape`).
    """
    with engine.connect().execution_options(kernel_read_only=True) as conn:
        current = schema_revision(conn)
        has_tables = current is None and bool(sa.inspect(conn).get_table_names())
        drift = schema_drift(conn) if current == HEAD_REVISION else None
    if current == HEAD_REVISION:
        if drift is not None and drift.breaks:
            raise SchemaUnknown(
                f"the database is at schema revision {current} but its schema differs from "
                f"what the migrations make: {drift.describe()}; restore it (or migrate a new "
                "database and copy the data over); `kernel doctor` lists every difference",
                revision=current,
                expected=HEAD_REVISION,
                missing=drift.missing,
                different=drift.different,
            )
        return
    hint = f"run `{MIGRATE_COMMAND}`"
    if current is None:
        what = "holds tables of something else" if has_tables else "has no kernel schema yet"
        raise SchemaUnknown(f"the database {what}; {hint}", revision=None, expected=HEAD_REVISION)
    if _is_known(current):
        raise SchemaUnknown(
            f"the database is at schema revision {current}, this code needs "
            f"{HEAD_REVISION}; {hint}",
            revision=current,
            expected=HEAD_REVISION,
        )
    raise _unknown_revision(current)


def schema_drift(conn: sa.Connection) -> SchemaDrift | None:
    """How the live schema differs from what the migrations to the head make; None if
    ``shape.json`` does not describe the head (:func:`kernel.db.schema_shape.expected_shape`)."""
    expected = expected_shape(conn.dialect.name, HEAD_REVISION)
    return None if expected is None else compare(live_shape(conn), expected)


def _is_known(revision: str) -> bool:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config())
    return revision in {rev.revision for rev in script.walk_revisions()}


def _unknown_revision(current: str) -> SchemaUnknown:
    return SchemaUnknown(
        f"the database is at schema revision {current}, which this release does not know "
        "(written by a newer release?); upgrade celery-kernel before using it",
        revision=current,
        expected=HEAD_REVISION,
    )


def migrate(engine: sa.Engine) -> tuple[str | None, str]:
    """Upgrade the schema to this code's head revision.

    Returns:
        (revision before, revision after).

    Raises:
        SchemaUnknown: the database is at a revision this release does not know.
    """
    # A current schema is read, not locked: a process opening the kernel inside its own
    # write transaction (the first enqueue with ``connection=`` on SQLite) would otherwise
    # wait for the write lock its own transaction holds.
    with engine.connect().execution_options(kernel_read_only=True) as conn:
        if schema_revision(conn) == HEAD_REVISION:
            return HEAD_REVISION, HEAD_REVISION
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Workers and Beats starting together all migrate; one at a time, the
            # rest find the schema current. (SQLite's BEGIN IMMEDIATE already serialises.)
            advisory_xact_lock(conn, _MIGRATION_LOCK)
        before = schema_revision(conn)
        if before == HEAD_REVISION:
            return before, HEAD_REVISION
        if before is not None and not _is_known(before):
            # alembic would fail with its own CommandError; say what it means instead.
            raise _unknown_revision(before)
        from alembic import command

        cfg = _alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return before, HEAD_REVISION
