"""The ``http`` adapter: one HTTP request per run, with the occurrence as idempotency key.

A retried or reclaimed occurrence sends the same ``Idempotency-Key`` (the
occurrence id), so a server that honours the header applies the effect once
however often the kernel has to try. When an at-most-once run's outcome is unknown
(its lease expired mid-request), the payload's ``lookup`` asks the server by that key
whether the request took effect (:meth:`HttpAdapter.adjudicate`).
"""

from __future__ import annotations

import codecs
import http.client
import json
import urllib.error
import urllib.request
from email.message import Message
from typing import IO, Any
from urllib.parse import quote, urlsplit

from adapters.base import (
    NO_RUNTIME_CONTROL,
    AdapterError,
    AdjudicationContext,
    BaseAdapter,
    Cancelled,
    ExecutionContext,
    read_payload,
    tail_text,
)
from adapters.secrets import resolve_secrets
from kernel.redaction import is_sensitive_name
from kernel.spec.payloads import HttpPayload
from kernel.states import Decision, Effect
from kernel.types import Occurrence, Verdict

__all__ = ["HttpAdapter", "BODY_LIMIT"]

#: Bytes of the response body kept in the result (the head).
BODY_LIMIT = 64 * 1024
_ERROR_BODY_IN_MESSAGE = 500


class HttpAdapter(BaseAdapter):
    """Sends ``payload`` as a request; the result is ``{status, body, truncated}``.

    The payload is the one :mod:`kernel.spec.payloads` validated: ``url``, ``method``
    (POST when there is a body and none was named, else GET), ``headers``,
    ``secret_headers`` (header name → secret name, see :mod:`adapters.secrets`), and
    ``json`` (sent as JSON) or ``body`` (sent as UTF-8 text). 5xx, 429, timeouts and
    connection failures are retryable; other 4xx answers are not. Cancellation is checked before the
    request is sent; a request in flight runs to its timeout.

    A failure's effect (:class:`kernel.states.Effect`): not applied when the request never
    reached the server whole (DNS, refused, a connect timeout) or the server refused it
    (4xx, 429, 503); unknown once it was sent and no answer came (a read timeout, a reset
    or closed connection) or the answer was another 5xx; applied when the status came and
    the body was cut.
    """

    kind = "http"
    runtime_control = NO_RUNTIME_CONTROL
    #: Request timeout when the job sets none.
    default_timeout_s: float = 30.0

    def __init__(self, app: Any = None) -> None:
        super().__init__(app)
        self._opener = urllib.request.build_opener()

    def execute(self, ctx: ExecutionContext) -> Any:
        request, secrets = _build_request(ctx.occurrence)
        ctx.secrets.update(secrets)
        if ctx.cancelled.is_set():
            raise Cancelled(f"occurrence {ctx.occurrence.id} was cancelled before the request")
        timeout = self.default_timeout_s if ctx.timeout_s is None else ctx.timeout_s
        target = _describe(request)
        try:
            response = self._opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            with exc:
                raise _status_error(target, exc) from None
        except urllib.error.URLError as exc:
            # urllib raises URLError only while connecting and sending (DNS, refused, a
            # connect timeout): the server never had the whole request.
            if isinstance(exc.reason, TimeoutError):
                raise _timeout(target, timeout, Effect.NOT_APPLIED) from exc
            raise _connection_error(target, exc.reason, Effect.NOT_APPLIED) from exc
        except TimeoutError as exc:  # sent, no answer in time: it may have been applied
            raise _timeout(target, timeout, Effect.UNKNOWN) from exc
        except (ConnectionError, http.client.HTTPException) as exc:  # sent, answer lost
            raise _connection_error(target, exc, Effect.UNKNOWN) from exc
        with response:
            try:
                body, truncated = _read_head(response, BODY_LIMIT)
            except (OSError, http.client.HTTPException) as exc:
                # The status line came: the server has said what it did.
                raise AdapterError(
                    "HTTP_BODY",
                    f"{target} answered {response.status}, then reading its body failed: {exc}",
                    retryable=True,
                    effect=Effect.APPLIED,
                ) from exc
            text = body.decode(_charset(response.headers), errors="replace")
            return {"status": response.status, "body": text, "truncated": truncated}

    def adjudicate(self, ctx: AdjudicationContext) -> Verdict | None:
        """Ask the payload's ``lookup`` about the uncertain run, by its Idempotency-Key.

        A status in ``lookup.applied`` / ``lookup.not_applied`` decides, with the lookup
        and its status as evidence; no ``lookup``, another status, or no answer within
        ``ctx.timeout_s``: cannot tell (None).
        """
        payload = read_payload(ctx.occurrence.payload, HttpPayload)
        lookup = payload.lookup
        if lookup is None:
            return None
        headers, secrets = _headers(ctx.occurrence, payload)
        ctx.secrets.update(secrets)
        request = urllib.request.Request(lookup.url, headers=headers, method=lookup.method)
        target = _describe(request)
        try:
            with self._opener.open(request, timeout=ctx.timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            with exc:
                status = exc.code
        except (
            urllib.error.URLError,
            TimeoutError,
            ConnectionError,
            http.client.HTTPException,
        ) as exc:
            ctx.logger.warning("lookup %s failed: %s; cannot tell", target, exc)
            return None
        evidence = {"lookup": target, "status": status}
        if status in lookup.applied:
            return Verdict(Decision.APPLIED, evidence)
        if status in lookup.not_applied:
            return Verdict(Decision.NOT_APPLIED, evidence)
        ctx.logger.warning("lookup %s answered %s, which decides nothing", target, status)
        return None


def _headers(occurrence: Occurrence, payload: HttpPayload) -> tuple[dict[str, str], set[str]]:
    """The headers of the occurrence's request (the lookup's too), and their secret values."""
    secrets = resolve_secrets(payload.secret_headers)
    headers = {**payload.headers, **secrets}
    # Ours go last so a job's own headers cannot replace the kernel's identity.
    headers.update(
        {
            "Idempotency-Key": str(occurrence.id),
            "X-Kernel-Job": quote(occurrence.job_id, safe=""),
            "X-Kernel-Trigger": quote(occurrence.trigger_key, safe=":"),
            "X-Kernel-Attempt": str(occurrence.attempt),
        }
    )
    stored = {v for name, v in payload.headers.items() if is_sensitive_name(name)}
    return headers, {*secrets.values(), *stored}


def _build_request(occurrence: Occurrence) -> tuple[urllib.request.Request, set[str]]:
    """The request the validated payload describes, and the secret values it carries."""
    payload = read_payload(occurrence.payload, HttpPayload)
    headers, secrets = _headers(occurrence, payload)
    data = None
    if payload.has_json:
        data = json.dumps(payload.json_, separators=(",", ":")).encode()
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
    elif payload.has_body:
        data = payload.body.encode()
    request = urllib.request.Request(payload.url, data=data, headers=headers, method=payload.method)
    return request, secrets


def _describe(request: urllib.request.Request) -> str:
    """Method and URL for messages, without credentials or query (they may hold secrets)."""
    parts = urlsplit(request.full_url)
    host = parts.netloc.rpartition("@")[2]
    return f"{request.get_method()} {parts.scheme}://{host}{parts.path}"


def _read_head(stream: IO[bytes], limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes, and whether the body was longer (the rest is not read)."""
    data = bytearray()
    while len(data) <= limit and (chunk := stream.read(limit + 1 - len(data))):
        data += chunk
    return bytes(data[:limit]), len(data) > limit


def _charset(headers: Message) -> str:
    charset = headers.get_content_charset() or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        return "utf-8"
    return charset


def _status_error(target: str, exc: urllib.error.HTTPError) -> AdapterError:
    status = exc.code
    head, _ = _read_head(exc, _ERROR_BODY_IN_MESSAGE)
    body = head.decode(_charset(exc.headers), errors="replace").strip()
    message = f"{target} answered {status} {exc.reason}" + (
        f": {tail_text(body, _ERROR_BODY_IN_MESSAGE)}" if body else ""
    )
    if status == 429:
        return AdapterError("HTTP_429", message, retryable=True)
    if status >= 500:
        # 503 refuses the request; any other 5xx may come after the effect (a crash, a
        # gateway that lost the upstream's answer): its outcome is unknown.
        refused = status == 503
        effect = Effect.NOT_APPLIED if refused else Effect.UNKNOWN
        return AdapterError("HTTP_5XX", message, retryable=True, effect=effect)
    if 400 <= status < 500:
        return AdapterError("HTTP_4XX", message, retryable=False)
    # An unfollowed redirect or an informational answer: retrying sends the same request.
    return AdapterError("HTTP_STATUS", message, retryable=False)


def _timeout(target: str, timeout: float, effect: Effect) -> AdapterError:
    when = (
        "before the request was sent" if effect == Effect.NOT_APPLIED else "waiting for the answer"
    )
    return AdapterError(
        "TIMEOUT", f"{target} timed out after {timeout}s {when}", retryable=True, effect=effect
    )


def _connection_error(target: str, reason: object, effect: Effect) -> AdapterError:
    when = "" if effect == Effect.NOT_APPLIED else " after the request was sent"
    return AdapterError(
        "HTTP_CONNECTION", f"{target} failed{when}: {reason}", retryable=True, effect=effect
    )
