"""A run's captured output on its way to the kernel, bounded by the job's ``output`` policy.

Shell stdout/stderr and ``ctx.logger`` lines arrive here from the adapter's threads;
the lease keeper flushes them with each renewal and the runtime once more before the
settle, each flush one fenced write (:meth:`kernel.Kernel.append_output`). The first
half of ``output.limit`` bytes is stored as it comes, so ``occurrences logs --follow``
shows a run live; past that only the last half is kept, stored at the end after a line
saying how much was dropped. Secret values the adapter handed to the job are masked
per stream as the output arrives, before the head/tail split, and across the pieces a
program wrote them in (:class:`adapters.secrets.StreamScrubber`), so no secret is ever
stored, whole or in pieces.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from adapters.secrets import StreamScrubber
from kernel import Claim, Kernel, KernelError

__all__ = ["RunOutput", "RunLogger", "DEFAULT_OUTPUT_LIMIT"]

#: Bytes stored per run when a snapshot predates the ``output`` policy.
DEFAULT_OUTPUT_LIMIT = 64 * 1024

log = logging.getLogger("celery_kernel.runtime")


class RunOutput:
    """Buffers one run's output chunks and writes them to the kernel under its fence."""

    def __init__(self, kernel: Kernel, claim: Claim, policy: Mapping[str, Any]) -> None:
        self._kernel = kernel
        self._claim = claim
        limit = int(policy.get("limit", DEFAULT_OUTPUT_LIMIT))
        self._head_room = limit - limit // 2
        self._tail_room = limit // 2
        self.secrets: set[str] = set()
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str]] = []
        self._tail: deque[tuple[str, str]] = deque()
        self._tail_bytes = 0
        self._dropped = 0
        self._head_full = False
        self._scrubbers: dict[str, StreamScrubber] = {}

    def write(self, stream: str, text: str) -> None:
        if not text:
            return
        with self._lock:
            scrubber = self._scrubbers.setdefault(stream, StreamScrubber())
            self._keep(stream, scrubber.feed(text, self.secrets))

    def _keep(self, stream: str, text: str) -> None:
        """Add masked ``text`` to the head while it has room, else to the tail."""
        if text and not self._head_full:
            head = text.encode()[: self._head_room].decode(errors="ignore")
            if head:
                self._pending.append((stream, head))
                self._head_room -= len(head.encode())
            text = text[len(head) :]
            self._head_full = bool(text)
        if text:
            self._tail.append((stream, text))
            self._tail_bytes += len(text.encode())
            self._trim_tail()

    def _trim_tail(self) -> None:
        """Drop the oldest tail bytes beyond the tail's room (at a character boundary)."""
        while self._tail_bytes > self._tail_room:
            stream, oldest = self._tail[0]
            data = oldest.encode()
            excess = self._tail_bytes - self._tail_room
            kept = "" if len(data) <= excess else data[excess:].decode(errors="ignore")
            if kept:
                self._tail[0] = (stream, kept)
            else:
                self._tail.popleft()
            dropped = len(data) - len(kept.encode())
            self._tail_bytes -= dropped
            self._dropped += dropped

    def flush(self, *, final: bool = False) -> None:
        """Store what arrived since the last flush (and, when ``final``, the kept tail)."""
        if not self._scrubbers:
            return  # nothing ever written (most runs): nothing pending, kept or dropped
        with self._lock:
            if final:
                for stream, scrubber in self._scrubbers.items():
                    self._keep(stream, scrubber.close(self.secrets))
            chunks, self._pending = self._pending, []
            if final:
                if self._dropped:
                    chunks.append(("note", f"[{self._dropped} bytes of output not kept]\n"))
                chunks.extend(self._tail)
                self._tail.clear()
        if not chunks:
            return
        claim = self._claim
        occurrence_id, owner, fence = claim.occurrence.id, claim.owner, claim.fence
        try:
            self._kernel.append_output(
                occurrence_id,
                owner=owner,
                fence=fence,
                chunks=chunks,
            )
        except KernelError as exc:  # output is evidence, not state: the run goes on without it
            log.warning(
                "run output not stored: %s",
                exc,
                extra={"action": "output_not_stored", "occurrence_id": occurrence_id},
            )


class RunLogger(logging.LoggerAdapter[logging.Logger]):
    """The run's ``ctx.logger``: every line it logs is also kept in the run's output."""

    output: RunOutput | None = None

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        super().log(level, msg, *args, **kwargs)
        if self.output is not None and self.isEnabledFor(level):
            text = str(msg) % args if args else str(msg)
            self.output.write("log", f"{logging.getLevelName(level)} {text}\n")
