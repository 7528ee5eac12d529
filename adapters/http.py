"""The ``http`` adapter: one HTTP request per run, with the occurrence as idempotency key.

A retried or reclaimed occurrence sends the same ``Idempotency-Key`` (the
occurrence id), so a server that honours the header applies the effect once
however often the kernel has to try. When an at-most-once run's outcome is unknown
(its lease expired mid-request), the payload's ``lookup`` asks the server by that key
whether the request took effect (:meth:`HttpAdapter.adjudicate`).

A response is an outcome: once any status line came back, a failure's effect is
``applied`` or ``unknown``, never ``not_applied``, so an at-most-once request is never
sent again after the server answered. That is why the adapter follows redirects itself
(urllib's own following would turn a failed hop into "never sent"), skips interim 1xx
answers, and reads a body that the server cut short as an applied failure.
"""

from __future__ import annotations

import functools
import http.client
import json
import ssl
import time
import urllib.error
import urllib.request
from email.message import Message
from typing import IO, Any
from urllib.parse import quote, urljoin, urlsplit

from adapters.base import (
    NO_RUNTIME_CONTROL,
    AdapterError,
    AdjudicationContext,
    BaseAdapter,
    Cancelled,
    ExecutionContext,
    read_payload,
)
from adapters.secrets import masked_prefix, resolve_secrets, secret_reach
from kernel import Decision, Effect, HttpPayload, Occurrence, Verdict, is_sensitive_name

__all__ = ["HttpAdapter", "BODY_LIMIT"]

#: Bytes of the response body kept in the result (the head).
BODY_LIMIT = 64 * 1024
_ERROR_BODY_IN_MESSAGE = 500
#: The 3xx answers that name the request's next hop in ``Location``.
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class HttpAdapter(BaseAdapter):
    """Sends ``payload`` as a request; the result is ``{status, body, truncated}``.

    The payload is the one :mod:`kernel.spec.payloads` validated: ``url``, ``method``
    (POST when there is a body and none was named, else GET), ``headers``,
    ``secret_headers`` (header name → secret name, see :mod:`adapters.secrets`),
    ``json`` (sent as JSON) or ``body`` (sent as UTF-8 text), and ``follow_redirects``.
    5xx, 429, timeouts and connection failures are retryable; other 4xx answers are not.
    Cancellation is checked before the request is sent; a request in flight runs to its
    timeout, which bounds the whole chain of redirects.

    A redirect is followed while ``follow_redirects`` allows (by default none for POST
    and PATCH): 303, and 301/302 after a POST, become a GET without body; 307/308 send
    the same request on. A hop to another origin (scheme, host, port) carries none of
    the job's headers, its secrets or the kernel's ``Idempotency-Key``; a hop from https
    to http, or to another scheme, is refused.

    A failure's effect (:class:`kernel.states.Effect`): not applied only when no answer
    came and the request never reached the server whole (DNS, refused, a connect
    timeout); applied when a 2xx came and its body was cut; unknown otherwise: sent with
    no answer (a read timeout, a reset), any answer other than 2xx (the server's word on
    what it did is for a ``lookup`` or an operator to judge), or a hop failing after an
    earlier answer.
    """

    kind = "http"
    runtime_control = NO_RUNTIME_CONTROL
    #: Request timeout when the job sets none.
    default_timeout_s: float = 30.0

    def __init__(self, app: Any = None) -> None:
        super().__init__(app)
        self._opener = urllib.request.build_opener(_Plain(), _Tls(), _EveryAnswer())

    def execute(self, ctx: ExecutionContext) -> Any:
        payload = read_payload(ctx.occurrence.payload, HttpPayload)
        request, secrets = _build_request(ctx.occurrence, payload)
        ctx.secrets.update(secrets)
        if ctx.cancelled.is_set():
            raise Cancelled(f"occurrence {ctx.occurrence.id} was cancelled before the request")
        timeout = self.default_timeout_s if ctx.timeout_s is None else ctx.timeout_s
        deadline = time.monotonic() + timeout
        answered: str | None = None  # the last answer so far, once there was one
        hops = 0
        while True:
            target = _describe(request)
            with self._send(request, timeout, deadline, answered) as response:
                status, location = response.status, response.headers.get("Location")
                if status not in _REDIRECTS or not location:
                    return _outcome(target, response, ctx.secrets)
            answered = f"{target} answered {status}"
            next_url = urljoin(request.full_url, location)
            if hops == payload.redirect_limit:
                raise AdapterError(
                    "HTTP_REDIRECT",
                    f"{answered} to {_where(next_url)}; the job follows "
                    f"{payload.redirect_limit} redirects (payload.follow_redirects)",
                    retryable=False,
                    effect=Effect.UNKNOWN,
                )
            request = _next_hop(request, status, next_url, answered)
            hops += 1

    def _send(
        self, request: urllib.request.Request, timeout: float, deadline: float, answered: str | None
    ) -> http.client.HTTPResponse:
        """Send one hop; its failures classified by whether an earlier hop was answered."""
        target = _describe(request)
        # Before any answer a request that never got through was not applied; after
        # one, the server has acted on the request already, whatever the next hop does.
        unsent, after = (
            (Effect.NOT_APPLIED, "") if answered is None else (Effect.UNKNOWN, f" ({answered})")
        )
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout(target + after, timeout, Effect.UNKNOWN)
        try:
            response: http.client.HTTPResponse = self._opener.open(request, timeout=left)
        except urllib.error.URLError as exc:
            # urllib raises URLError only while connecting and sending (DNS, refused, a
            # connect timeout): the server never had the whole request.
            if isinstance(exc.reason, TimeoutError):
                raise _timeout(target + after, timeout, unsent) from exc
            raise _connection_error(target + after, exc.reason, unsent) from exc
        except TimeoutError as exc:  # sent, no answer in time: it may have been applied
            raise _timeout(target + after, timeout, Effect.UNKNOWN) from exc
        except (ConnectionError, http.client.HTTPException) as exc:  # sent, answer lost
            raise _connection_error(target + after, exc, Effect.UNKNOWN) from exc
        return response

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
                status = response.status  # a redirect is not followed: it decides nothing
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


def _build_request(
    occurrence: Occurrence, payload: HttpPayload
) -> tuple[urllib.request.Request, set[str]]:
    """The request the validated payload describes, and the secret values it carries."""
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


def _next_hop(
    request: urllib.request.Request, status: int, url: str, answered: str
) -> urllib.request.Request:
    """The request a redirect to ``url`` asks for, or a refusal (``answered`` says whose)."""
    here, there = urlsplit(request.full_url), urlsplit(url)
    refusal = ""
    if there.scheme not in ("http", "https") or not there.hostname:
        refusal = "a URL that is not http:// or https://"
    elif here.scheme == "https" and there.scheme == "http":
        refusal = "http:// from https://: the request would travel in clear"
    if refusal:
        raise AdapterError(
            "HTTP_REDIRECT",
            f"{answered} to {_where(url)}; not followed: a redirect to {refusal}",
            retryable=False,
            effect=Effect.UNKNOWN,
        )
    method, data = request.get_method(), request.data
    # 303 asks for the answer with GET; clients turn a redirected POST into GET too.
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, data = "GET", None
    headers = dict(request.headers)  # urllib keeps them as "Content-type", "Idempotency-key"
    if data is None:
        headers.pop("Content-type", None)
    if _origin(here) != _origin(there):
        # Nothing of the job's own travels to a server it did not name: not its headers,
        # its secrets, nor the key that identifies its effect.
        headers = {k: v for k, v in headers.items() if k == "Content-type"}
    return urllib.request.Request(url, data=data, headers=headers, method=method)


def _origin(parts: Any) -> tuple[str, str, int]:
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _outcome(target: str, response: http.client.HTTPResponse, secrets: set[str]) -> dict[str, Any]:
    """A final answer as the run's result, or its failure; ``secrets`` are masked in the
    body before it is cut (a piece of one left in front of the cut would be recognised by
    nothing later)."""
    status = response.status
    if not 200 <= status < 300:
        raise _status_error(target, response, secrets)
    try:
        head, cut = _read_head(response, BODY_LIMIT + secret_reach(secrets))
        if not cut and response.length:  # http.client counts what Content-Length owes
            raise http.client.IncompleteRead(head, response.length)
    except (OSError, http.client.HTTPException) as exc:
        # The status line came: the server has said what it did.
        raise AdapterError(
            "HTTP_BODY",
            f"{target} answered {status}, then reading its body failed: {exc}",
            retryable=True,
            effect=Effect.APPLIED,
        ) from exc
    text = _decode(head, response.headers)
    body = masked_prefix(text, BODY_LIMIT, secrets, complete=not cut)
    return {"status": status, "body": body, "truncated": cut or len(head) > BODY_LIMIT}


def _where(url: str) -> str:
    """A URL for messages, without credentials or query (they may hold secrets)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def _describe(request: urllib.request.Request) -> str:
    return f"{request.get_method()} {_where(request.full_url)}"


def _read_head(stream: IO[bytes], limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes, and whether the body was longer (the rest is not read)."""
    data = bytearray()
    while len(data) <= limit and (chunk := stream.read(limit + 1 - len(data))):
        data += chunk
    return bytes(data[:limit]), len(data) > limit


def _decode(body: bytes, headers: Message) -> str:
    """The body as text in its declared charset, else UTF-8; never a failure.

    A charset name may be any codec Python knows, and some are not text encodings
    (``hex``, ``rot13``, ``zlib``) or refuse to decode (``idna``, ``undefined``): the answer
    stands whatever its label says.
    """
    charset = headers.get_content_charset()
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except (LookupError, ValueError):
            pass
    return body.decode("utf-8", errors="replace")


def _status_error(
    target: str, response: http.client.HTTPResponse, secrets: set[str]
) -> AdapterError:
    """A final answer other than 2xx. Its effect is unknown: the server answered, and
    only a ``lookup`` or an operator can judge what its refusal means for the effect.
    The start of its body says why, ``secrets`` masked before the cut."""
    status = response.status
    limit = _ERROR_BODY_IN_MESSAGE
    try:
        head, cut = _read_head(response, limit + secret_reach(secrets))
    except (OSError, http.client.HTTPException):
        head, cut = b"", False  # the status says enough
    shown = masked_prefix(_decode(head, response.headers), limit, secrets, complete=not cut)
    body = shown.strip() + ("..." if cut or len(head) > limit else "")
    message = f"{target} answered {status} {response.reason}" + (f": {body}" if body else "")
    if status == 429 or status >= 500:
        code = "HTTP_429" if status == 429 else "HTTP_5XX"
        return AdapterError(code, message, retryable=True, effect=Effect.UNKNOWN)
    code = "HTTP_4XX" if 400 <= status < 500 else "HTTP_STATUS"
    # A 4xx is the server's refusal; a 3xx without Location or a 101 is no answer a
    # retry would change.
    return AdapterError(code, message, retryable=False, effect=Effect.UNKNOWN)


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


class _FinalResponse(http.client.HTTPResponse):
    """Skips every interim 1xx answer (``103 Early Hints``, ``102 Processing``), where
    http.client skips only ``100 Continue``; ``101`` is final (a protocol switch)."""

    def _read_status(self) -> tuple[str, int, str]:
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]  # private: not in typeshed
            if not 100 <= status < 200 or status == 101:
                return version, status, reason
            http.client.parse_headers(self.fp)  # the interim answer's headers: read, dropped


class _PlainConnection(http.client.HTTPConnection):
    response_class = _FinalResponse


class _TlsConnection(http.client.HTTPSConnection):
    response_class = _FinalResponse


class _Plain(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_PlainConnection, req)


class _Tls(urllib.request.HTTPSHandler):
    @functools.cached_property
    def _tls(self) -> ssl.SSLContext:
        # Made at the first https request: loading the system's CA certificates costs ~25 ms
        # of CPU, which every process that only lists the adapters would pay (the CLI
        # checking a job file's kinds, an operator's action on a run).
        return ssl.create_default_context()

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_TlsConnection, req, context=self._tls)


class _EveryAnswer(urllib.request.HTTPErrorProcessor):
    """Hands every answer back as it came, redirects included: the adapter judges each."""

    def http_response(
        self, request: urllib.request.Request, response: http.client.HTTPResponse
    ) -> http.client.HTTPResponse:
        return response

    https_response = http_response
