"""Domain and transport errors, rendered everywhere as RFC 9457 problem+json.

Domain code raises `ProblemError` subclasses; `bankrail.http.problems` turns them (and the
framework's own 404/405/validation errors) into responses. The catalogue below is also the
content of the human-readable `/errors` page.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

import orjson

problem_title_var: ContextVar[str | None] = ContextVar("problem_title", default=None)
"""The title of the problem the request being served was answered with (what the sandbox's
access line names): noted by its renderer (`bankrail.http.problems`), or by
`note_problem_title` for one rendered in another task, so that the access line reads no
answer's body to find it."""


def note_problem_title(document: bytes) -> None:
    """Note, for the request being served, the title of the problem document it is answered
    with, rendered in another task (a refusal decided in a batch, or stored and replayed);
    nothing when `document` is not a problem document."""
    try:
        # orjson reads bytes itself, not a subclass of it (a replayed answer).
        title = orjson.loads(document if type(document) is bytes else bytes(document)).get("title")
    except (orjson.JSONDecodeError, AttributeError):
        return
    if isinstance(title, str):
        problem_title_var.set(title)


@dataclass(frozen=True)
class ProblemType:
    """One documented kind of error: its anchor on `/errors`, HTTP status and title."""

    anchor: str
    status: int
    title: str
    explanation: str


INVALID_PARAMETERS = ProblemType(
    "invalid-parameters",
    400,
    "Invalid Parameters",
    "The request was malformed or a field failed validation. `errors` maps each offending "
    "JSON path to its messages. Fix the request; retrying it unchanged will fail again.",
)
UNAUTHENTICATED = ProblemType(
    "unauthenticated",
    401,
    "Unauthenticated",
    "The access token is missing, expired or invalid, or the request signature could not be "
    "verified (unknown kid, bad signature, or a mandatory header such as Idempotency-Key "
    "missing from the signed `tl_headers`). Obtain a new token or fix the signature.",
)
FORBIDDEN = ProblemType(
    "forbidden",
    403,
    "Forbidden",
    "The token is valid but lacks what the route needs. For the payments and payouts APIs "
    "the token must carry the `payments` scope; otherwise the detail names InvalidAudience.",
)
NOT_FOUND = ProblemType(
    "not-found",
    404,
    "Not Found",
    "No such resource exists for this merchant. Resources of other merchants are reported "
    "as not found too.",
)
METHOD_NOT_ALLOWED = ProblemType(
    "method-not-allowed",
    405,
    "Method Not Allowed",
    "The path exists but does not accept this HTTP method.",
)
CONFLICT = ProblemType(
    "conflict",
    409,
    "Conflict",
    "The request conflicts with the current state of the resource, for example an action "
    "on a payment that has already finished, or a v1 `transaction_id` reused with a "
    "different body.",
)
IDEMPOTENCY_CONCURRENCY = ProblemType(
    "idempotency-key-concurrency-conflict",
    409,
    "Idempotency-Key Concurrency Conflict",
    "Another request with the same Idempotency-Key is still being processed. Wait until it "
    "completes, then repeat the same request with the same key: the identical response is "
    "returned.",
)
PAYLOAD_TOO_LARGE = ProblemType(
    "payload-too-large",
    413,
    "Payload Too Large",
    "The request body exceeds the size limit (1 MiB by default).",
)
REQUEST_TIMEOUT = ProblemType(
    "request-timeout",
    408,
    "Request Timeout",
    "The request's head or body did not arrive in time (the head within the head timeout, "
    "10 s by default; the body within the request timeout, 30 s by default). Nothing was "
    "done and the connection is closed; the request may be sent again.",
)
UNSUPPORTED_MEDIA_TYPE = ProblemType(
    "unsupported-media-type",
    415,
    "Unsupported Media Type",
    "The body must be JSON, sent with `Content-Type: application/json`.",
)
IDEMPOTENCY_REUSE = ProblemType(
    "idempotency-key-reuse",
    422,
    "Idempotency-Key Reuse",
    "The Idempotency-Key was already used with a different request (method, path or body). "
    "Do not retry; keep the body identical on retries, or use a new key for a new request.",
)
RATE_LIMITED = ProblemType(
    "rate-limit-exceeded",
    429,
    "Rate Limit Exceeded",
    "Too many requests from this client, or too many wrong credentials (client secrets, "
    "tokens, passwords) from this address or for this identity, which then refuses right "
    "ones too for a while. Wait for the number of seconds in `Retry-After`.",
)
HEADERS_TOO_LARGE = ProblemType(
    "request-header-fields-too-large",
    431,
    "Request Header Fields Too Large",
    "The request line and headers exceed the size limit (16 KiB by default). Nothing was "
    "done and the connection is closed; send smaller headers.",
)
UNKNOWN_ERROR = ProblemType(
    "unknown-error",
    500,
    "Unknown Error",
    "Something went wrong on our side. Nothing was stored for the Idempotency-Key, so the "
    "same request may be retried safely. Quote the `trace_id` when reporting it.",
)
SERVICE_UNAVAILABLE = ProblemType(
    "service-unavailable",
    503,
    "Service Unavailable",
    "The service cannot reach its database right now, the request ran past the request "
    "timeout and was abandoned with nothing stored, or the service has as many connections "
    "open as it accepts. Retry after `Retry-After` seconds, with the same Idempotency-Key.",
)

CATALOGUE: tuple[ProblemType, ...] = (
    INVALID_PARAMETERS,
    UNAUTHENTICATED,
    FORBIDDEN,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    CONFLICT,
    IDEMPOTENCY_CONCURRENCY,
    REQUEST_TIMEOUT,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    IDEMPOTENCY_REUSE,
    RATE_LIMITED,
    HEADERS_TOO_LARGE,
    UNKNOWN_ERROR,
    SERVICE_UNAVAILABLE,
)

_BY_STATUS: dict[int, ProblemType] = {}
for _problem in CATALOGUE:
    _BY_STATUS.setdefault(_problem.status, _problem)


def problem_type_for_status(status: int) -> ProblemType:
    """The default problem type for an HTTP status (used for framework errors)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return UNKNOWN_ERROR if status >= 500 else INVALID_PARAMETERS


class ProblemError(Exception):
    """An error the API answers with a problem+json body."""

    def __init__(
        self,
        problem: ProblemType,
        detail: str,
        *,
        errors: dict[str, list[str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}


class InvalidParameters(ProblemError):
    """Bad input: 400 with `errors` naming the fields."""

    def __init__(self, detail: str, errors: dict[str, list[str]] | None = None) -> None:
        super().__init__(INVALID_PARAMETERS, detail, errors=errors)


def invalid_field(path: str, message: str) -> InvalidParameters:
    """A 400 problem naming one field."""
    return InvalidParameters(f"{path}: {message}", {path: [message]})


class Unauthenticated(ProblemError):
    """Missing or invalid credentials or signature: 401."""

    def __init__(self, detail: str) -> None:
        super().__init__(UNAUTHENTICATED, detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(ProblemError):
    """Authenticated but not allowed: 403."""

    def __init__(self, detail: str) -> None:
        super().__init__(FORBIDDEN, detail)


class NotFound(ProblemError):
    """No such resource for this caller: 404."""

    def __init__(self, detail: str) -> None:
        super().__init__(NOT_FOUND, detail)


class Conflict(ProblemError):
    """The request conflicts with the resource's state: 409."""

    def __init__(self, detail: str) -> None:
        super().__init__(CONFLICT, detail)
