"""The facade's enqueue: a task's ad hoc runs, idempotent by key, optionally inside a
caller's own transaction (kernel/jobs/enqueueing.py, kernel/transaction/borrowed.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kernel.facade.base import FacadeBase, write
from kernel.jobs import chord_growth, enqueueing, replacement
from kernel.jobs.enqueueing import Enqueued, EnqueueRequest
from kernel.transaction.borrowed import Borrowed
from kernel.transaction.tx import Tx

__all__ = ["EnqueueFacade"]


class EnqueueFacade(FacadeBase):
    def enqueue(
        self,
        *,
        task: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        key: str | None = None,
        queue: str | None = None,
        delivery: str | None = None,
        countdown: float | None = None,
        eta: datetime | None = None,
        priority: int | None = None,
        expires: float | datetime | None = None,
        settings: Mapping[str, Any] | None = None,
        callbacks: Sequence[Mapping[str, Any]] = (),
        errbacks: Sequence[Mapping[str, Any]] = (),
        connection: Any = None,
        timeout: float | None = None,
        hinted: bool = False,
        request: Mapping[str, Any] | None = None,
    ) -> Enqueued:
        """Make an occurrence of ``task``'s implicit job (``task:<task>``), or find the
        one its ``key`` made.

        Args:
            task: the task's registered name; ``args``/``kwargs``: its JSON arguments.
            key: idempotency key (<= 200 characters): the same key of the same task
                answers the same occurrence, ``deduplicated``.
            queue, delivery: this run's, else the job's.
            countdown: seconds before it may be claimed; ``eta``: the instant (aware).
            priority: 0-255; higher ones are hinted and claimed first.
            expires: the start deadline, seconds from now or an aware datetime (Celery's
                ``expires``): not started by then, the run is skipped ``expired``.
            settings: job spec fields from the task's options (its implicit job's).
            timeout: this run's longest run in seconds, else the job's (its definition's,
                so the worker's time limits enforce it).
            callbacks, errbacks: signatures made occurrences when it succeeds, or is
                dead-lettered (kernel/spec/enqueue_request.py: Celery's link, a chain's
                rest, link_error).
            request: the fields of its body's ``self.request`` a Celery call set
                (:class:`~kernel.spec.sections.TaskRequest`), kept in its payload.
            connection: a SQLAlchemy Connection in an open transaction, or a psycopg
                connection, on the kernel's database: the occurrence is inserted in
                that transaction and exists exactly when it commits (its hint is then
                the pump's, or the caller's after the commit).
            hinted: the caller publishes the hint itself, at once (or, with a
                ``connection``, right after its commit), one held back by countdown/eta
                delivered at its ``not_before``: the pump waits ``rehint_after`` past
                the time it may start before it hints the occurrence too.

        Raises:
            InvalidArgument: a field is invalid, or ``connection`` is not one the kernel
                can write through; nothing is written.
            StateConflict: the task's settings give ``max_queued`` and this call would
                pass it (``reason`` queue_full, ``field`` settings.max_queued); nothing
                is written.
        """
        run = EnqueueRequest(
            task, args, kwargs, key, queue, delivery, countdown, eta, priority, settings or {},
            callbacks, errbacks, expires, timeout, request,
        )  # fmt: skip
        return self.enqueue_many([run], connection=connection, hinted=hinted)[0]

    def enqueue_many(
        self,
        requests: Sequence[EnqueueRequest],
        *,
        connection: Any = None,
        hinted: bool = False,
        chord: Mapping[str, Any] | None = None,
        nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
    ) -> list[Enqueued]:
        """:meth:`enqueue` for many runs in one transaction (one insert per 5000 of them):
        all of them, or (on any refusal, ``field`` starting ``requests[i].``) none.

        ``chord``: ``{"id": <chord id>, "body": <signature>}`` (Celery's group id, and a
        link signature, kernel/spec/enqueue_request.py): the runs are the chord's
        members, in group order. The settle of the last one to succeed makes the body
        (keyed by its ``options.task_id``, else ``chord:<id>``), the members' results
        as its first argument; a member dead-lettered or cancelled makes the body's
        errbacks instead (the body's task id first), once, and the body never.
        ``chord["result_id"]``: the task id the caller holds for the body when it is not
        the body's own (a chain's last step): the failure is written under it. No runs
        (an empty header): the body is made now, with [] as its first argument.

        ``chord["open"]`` True: an open chord (a generator's header), its members made
        as they come: ``chord={"id": <its id>, "grow": "caller"}`` enqueues more of them
        (each counted in, in order) until :meth:`close_chord` (or :meth:`abandon_chord`).

        ``nested``: (index, link signature carrying a ``chord``) pairs: chords made beside
        the runs (a group's member that is a chord, or a chain led by one); in ``chord``,
        each its member at that index of group order, whose body's end (a group body: each
        of its members) takes that place, as Celery counts a chord as its body. Their
        members' hints are ``on_runs_made``'s once this commits (the dispatch pump's
        without one, or in a caller's ``connection``)."""
        defined = self._enqueue_state()
        if connection is None:
            return self._enqueue(requests, defined, hinted, chord, nested)
        return self._borrowed.run(
            connection,
            lambda tx: enqueueing.enqueue(
                tx, requests, defined=defined, hinted=hinted, chord=chord, nested=nested
            ),
        )

    @write
    def _enqueue(
        self,
        tx: Tx,
        requests: Sequence[EnqueueRequest],
        defined: dict[str, dict[str, Any]],
        hinted: bool,
        chord: Mapping[str, Any] | None,
        nested: Sequence[tuple[int, Mapping[str, Any]]],
    ) -> list[Enqueued]:
        """The runs enqueued in a transaction of the kernel's own."""
        return enqueueing.enqueue(
            tx, requests, defined=defined, hinted=hinted, chord=chord, nested=nested
        )

    @write
    def close_chord(self, tx: Tx, chord_id: str) -> bool:
        """Close the open chord ``chord_id``: every member is made. Whichever sees it
        closed with every member settled makes the body, once: this close (True), or the
        last member's settle. False: its body waits for its members, or it was closed
        before, or it failed meanwhile. Raises NotFound."""
        return chord_growth.close(tx, chord_id)

    @write
    def abandon_chord(self, tx: Tx, chord_id: str) -> bool:
        """The open chord's caller could not make its members (its header raised): the
        chord fails as a member's failure fails it (its body's errbacks made, the body
        never); True when it failed now. Raises NotFound."""
        return chord_growth.abandon(tx, chord_id)

    def add_to_chord(
        self,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        requests: Sequence[EnqueueRequest],
        nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
    ) -> list[Enqueued]:
        """The held run, a chord's member, adds ``requests`` to its chord (Celery's
        ``self.add_to_chord``): made and counted in, fenced, in one transaction; the
        chord's body then waits for them too; ``nested``: chords added as members
        (:meth:`enqueue_many`'s).

        Raises:
            LeaseLost: (owner, fence) no longer holds the lease; nothing is written.
            InvalidArgument: the run is no chord's member, or a request is invalid;
                nothing is written.
        """
        defined = self._enqueue_state()
        return self._add_to_chord(occurrence_id, owner, fence, requests, defined, nested)

    @write
    def _add_to_chord(
        self,
        tx: Tx,
        occurrence_id: int,
        owner: str,
        fence: int,
        requests: Sequence[EnqueueRequest],
        defined: dict[str, dict[str, Any]],
        nested: Sequence[tuple[int, Mapping[str, Any]]],
    ) -> list[Enqueued]:
        return chord_growth.add_by_member(
            tx, occurrence_id, owner, fence, requests, defined, nested
        )

    def replace(
        self,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        replacement: Mapping[str, Any],
        task_id: str,
    ) -> list[int]:
        """Settle the held run as replaced by ``replacement`` (Celery's ``self.replace``),
        fenced, and make its replacement in the same transaction: a link signature (a
        task, a chain along its callbacks, or a chord) whose step with the run's
        ``task_id`` takes over that id, the run's callbacks and its place in a chord,
        every step up to it the run's errbacks (kernel/jobs/replacement.py). The run
        ends succeeded without a result; ``why`` tells what replaced it.

        Returns:
            The occurrences made now: the first step's, or a chord's members.

        Raises:
            LeaseLost: (owner, fence) no longer holds the lease; nothing is written.
            InvalidArgument: no step has ``task_id``, or a signature is invalid
                (``field`` starts with ``replacement``); nothing is written.
        """
        defined = self._enqueue_state()
        return self._replace(occurrence_id, owner, fence, replacement, task_id, defined)

    @write
    def _replace(
        self,
        tx: Tx,
        occurrence_id: int,
        owner: str,
        fence: int,
        sig: Mapping[str, Any],
        task_id: str,
        defined: dict[str, dict[str, Any]],
    ) -> list[int]:
        return replacement.replace(tx, occurrence_id, owner, fence, sig, task_id, defined)

    def _enqueue_state(self) -> dict[str, dict[str, Any]]:
        """The specs this kernel ensured, by job id (one definition per process and task)."""
        defined: dict[str, dict[str, Any]] | None = getattr(self, "_enqueue_defined", None)
        if defined is None:
            defined = {}
            self._enqueue_defined = defined
            self._borrowed = Borrowed(self.engine, self.clock)
        return defined
