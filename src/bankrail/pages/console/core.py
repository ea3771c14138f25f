"""What every console page shares: templates, the signed-in viewer, CSRF checks, error pages,
flash messages, and the ids and filters that pages read from their links.

Console routes answer HTML, never problem+json: `ConsoleRoute` turns the domain's
`ProblemError`s (404, 409, 400...) and the console's own `PageError`s into an error page with
the same status, and `Redirect` into a 303.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote, urlencode

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.datastructures import FormData, UploadFile

from bankrail.core.money import decimal_text, format_amount
from bankrail.core.problems import Forbidden, ProblemError
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.http.context import AppContext
from bankrail.merchants.console_users import user_scopes
from bankrail.pages.console.chart import format_time
from bankrail.pages.console.data import get_merchant, list_merchants
from bankrail.pages.console.forms import FieldError
from bankrail.pages.console.session import (
    FLASH_COOKIE_NAME,
    Session,
    SessionSigner,
    clear_cookies,
    console_signer,
    is_revoked,
    new_session,
    set_flash,
    set_session_cookie,
)
from bankrail.security.tokens import AccessClaims, audiences_for

P = ParamSpec("P")
T = TypeVar("T")
Errors = dict[str, list[str]]

templates = Environment(
    loader=PackageLoader("bankrail.pages", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["money"] = format_amount
templates.filters["major"] = functools.partial(decimal_text, thousands=False)
templates.filters["when"] = format_time
templates.filters["iso"] = lambda moment: iso_utc(moment) if moment else ""

SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

STATUS_TITLES = {
    400: "Invalid input",
    401: "Not signed in",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    422: "Request already used",
    429: "Rate Limit Exceeded",
    500: "Something went wrong",
}


class PageError(Exception):
    """Answer with the console's error page."""

    def __init__(self, status: int, message: str, title: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.title = title or STATUS_TITLES.get(status, "Error")


class Redirect(Exception):
    """Answer 303 See Other to `url`."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


def not_found(what: str) -> PageError:
    """The 404 page; another merchant's object is reported the same way as a missing one."""
    return PageError(404, f"There is no {what} with this identifier that you can see.")


def object_id(raw: str, what: str) -> uuid.UUID:
    """The id of a `what` in a page's path; the 404 page when it is not a UUID."""
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise not_found(what) from exc


def forbidden_form() -> PageError:
    """The 403 page for a POST whose CSRF token is missing or wrong."""
    return PageError(
        403,
        "This form was not sent from a current console page (its security token is missing or "
        "does not match your session). Nothing was changed. Reload the page and try again.",
        "Form expired",
    )


class ConsoleRoute(APIRoute):
    """A route answering HTML error pages and security headers for everything it returns."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                response = await original(request)
            except Redirect as redirect:
                response = RedirectResponse(redirect.url, status_code=303)
            except PageError as error:
                response = error_page(request, error)
            except ProblemError as problem:
                status = problem.problem.status
                response = error_page(
                    request, PageError(status, problem.detail, STATUS_TITLES.get(status))
                )
                response.headers.update(problem.headers)  # the Retry-After of a 429
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response

        return handler


def app_context(request: Request) -> AppContext:
    """The running service's context."""
    context: AppContext = request.app.state.context
    return context


@dataclass
class Viewer:
    """The signed-in person and the merchant the page is about (None: the operator's view
    of every merchant). `claims` are what the API would grant a merchant session (its
    client's or console user's current scopes); None for the operator, who may do anything."""

    session: Session
    signer: SessionSigner
    merchant_id: uuid.UUID | None
    merchant: dict[str, Any] | None
    merchants: list[dict[str, Any]] = field(default_factory=list)
    claims: AccessClaims | None = None

    @property
    def operator(self) -> bool:
        """True when signed in with the operator token."""
        return self.session.role == "operator"

    @property
    def csrf(self) -> str:
        """The CSRF token for this session's forms."""
        return self.signer.csrf_token(self.session.sid)

    def url(self, path: str, **params: str | None) -> str:
        """A console link that keeps the operator's chosen merchant."""
        query = {k: v for k, v in params.items() if v}
        if self.operator and self.merchant_id is not None:
            query = {"merchant_id": str(self.merchant_id), **query}
        return f"{path}?{urlencode(query)}" if query else path


def plain_url(path: str, **params: str | None) -> str:
    """A link for pages shown to someone not signed in."""
    query = {k: v for k, v in params.items() if v}
    return f"{path}?{urlencode(query)}" if query else path


def login_url(request: Request) -> str:
    """The sign-in page, returning to this page afterwards (GET only)."""
    if request.method != "GET":
        return "/console/login"
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/console/login?next=" + quote(target, safe="")


def safe_next(raw: str | None) -> str:
    """Where to go after signing in: a console page, never another site."""
    if (
        raw
        and raw.startswith("/console")
        and not raw.startswith(("/console/login", "/console/logout"))
        and "\\" not in raw
        and "//" not in raw
        and ".." not in raw
    ):
        return raw
    return "/console"


Need = Callable[[AccessClaims], object]
"""A scope check of the API (http.auth), raising Forbidden when the claims fall short."""


async def _session_scopes(
    conn: Connection, context: AppContext, session: Session
) -> frozenset[str] | None:
    """The current scopes of a merchant session: its console user's, or (sandbox only) its
    API client's; None when the user or client is gone or revoked, or when a client-secret
    session meets a production-mode server."""
    assert session.merchant_id is not None
    if session.user_id is not None:
        return await user_scopes(conn, session.user_id, session.merchant_id)
    if session.client_id is None or not context.settings.sandbox:
        return None
    client = await context.clients.get(context.pool, session.client_id)
    if client is None or client[0] != session.merchant_id:
        return None
    return client[1]


async def _merchant_viewer(
    conn: Connection, context: AppContext, session: Session, signer: SessionSigner
) -> Viewer | None:
    assert session.merchant_id is not None
    scopes = await _session_scopes(conn, context, session)
    merchant = await get_merchant(conn, session.merchant_id)
    if scopes is None or merchant is None:
        return None
    claims = AccessClaims(
        client_id=session.client_id or f"console-user:{session.user_id}",
        merchant_id=session.merchant_id,
        scopes=scopes,
        audiences=audiences_for(scopes),
        expires_at=datetime.fromtimestamp(session.expires, UTC),
    )
    return Viewer(session, signer, session.merchant_id, merchant, claims=claims)


async def _operator_viewer(
    request: Request, conn: Connection, session: Session, signer: SessionSigner
) -> Viewer:
    merchants = await list_merchants(conn)
    viewer = Viewer(session, signer, None, None, merchants)
    request.state.console_viewer = viewer
    raw = request.query_params.get("merchant_id", "").strip()
    if raw:
        try:
            chosen = uuid.UUID(raw)
        except ValueError as exc:
            raise PageError(400, "merchant_id must be a merchant's identifier.") from exc
        merchant = await get_merchant(conn, chosen)
        if merchant is None:
            raise not_found("merchant")
        viewer.merchant_id, viewer.merchant = chosen, merchant
    return viewer


def require(viewer: Viewer, needs: Need) -> None:
    """The 403 page unless the viewer may do what `needs` checks, as the API checks a token:
    the operator may do anything, a merchant session what its scopes allow."""
    if viewer.claims is None:
        return
    try:
        needs(viewer.claims)
    except Forbidden as exc:
        held = ", ".join(sorted(viewer.claims.scopes)) or "none"
        why = exc.detail.removeprefix("InvalidAudience: ")
        raise PageError(
            403,
            f"Your session's scopes ({held}) do not allow this; the API would refuse it too. "
            f"{why[:1].upper()}{why[1:]}",
        ) from exc


async def resolve_viewer(
    request: Request, *, needs: Need | None, operator_only: bool = False
) -> Viewer:
    """The signed-in viewer of the request, or a redirect to the sign-in page; the 403 page
    when the session's scopes fail `needs` (None: the page needs no scope).

    The operator may pick a merchant with `?merchant_id=`; a merchant always sees its own.
    """
    context = app_context(request)
    signer = await console_signer(request)
    now = context.clock.now()
    session = signer.read_session(request, now)
    if session is None or not session.signed_in:
        raise Redirect(login_url(request))
    if session.role == "operator" and session.operator_key != signer.operator_key(
        context.admin_token_hash
    ):
        raise Redirect(login_url(request))
    request.state.console_flash = signer.read_flash(request, now)
    async with context.pool.acquire() as conn:
        if await is_revoked(conn, session.sid):
            raise Redirect(login_url(request))
        if session.role == "merchant":
            found = await _merchant_viewer(conn, context, session, signer)
            if found is None:
                raise Redirect(login_url(request))
            viewer = found
        else:
            viewer = await _operator_viewer(request, conn, session, signer)
    request.state.console_viewer = viewer
    if operator_only and not viewer.operator:
        raise PageError(403, "Only the operator can open this page.")
    if needs is not None:
        require(viewer, needs)
    return viewer


async def read_form(request: Request) -> FormData:
    """The submitted form (cached by Starlette, so it can be read again)."""
    return await request.form()


def text(form: FormData, name: str) -> str:
    """A text field's value ("" when absent or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


async def upload_text(form: FormData, name: str, limit: int) -> str | None:
    """The text of an uploaded file field, or None when no file was chosen."""
    value = form.get(name)
    if not isinstance(value, UploadFile) or not value.filename:
        return None
    raw = await value.read(limit + 1)
    if len(raw) > limit:
        raise FieldError(name, f"the file is larger than {limit} bytes")
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise FieldError(name, "the file is not a text (PEM) file") from exc


async def check_csrf(request: Request, viewer: Viewer) -> FormData:
    """The form, after checking its CSRF token against the session (403 page otherwise)."""
    form = await read_form(request)
    if not viewer.signer.csrf_matches(viewer.session.sid, form.get("csrf_token")):
        raise forbidden_form()
    return form


async def check_visitor_csrf(request: Request) -> tuple[FormData, SessionSigner, datetime]:
    """The form of a page that needs no sign-in (sign-in, set-password), after checking its
    CSRF token against the visitor's session, whichever it is (403 page otherwise); with the
    signer and the service time it was checked at."""
    context = app_context(request)
    signer = await console_signer(request)
    now = context.clock.now()
    form = await read_form(request)
    session = signer.read_session(request, now)
    if session is None or not signer.csrf_matches(session.sid, form.get("csrf_token")):
        raise forbidden_form()
    return form, signer, now


async def render_visitor_form(
    request: Request,
    template: str,
    status: int = 200,
    *,
    new_if_signed_in: bool = False,
    show_flash: bool = False,
    **values: Any,
) -> HTMLResponse:
    """A form that needs no sign-in (sign-in, set-password), its CSRF token bound to the
    visitor's session: an anonymous one is started (and its cookie sent) when there is none,
    or when there is a signed-in one and `new_if_signed_in`. `show_flash`: a pending flash
    message is shown (the sign-in page)."""
    signer = await console_signer(request)
    now = app_context(request).clock.now()
    session = signer.read_session(request, now)
    fresh = session is None or (new_if_signed_in and session.signed_in)
    if session is None or fresh:
        session = new_session("anonymous", now)
    if show_flash:
        request.state.console_flash = signer.read_flash(request, now)
    response = render(request, template, status, csrf=signer.csrf_token(session.sid), **values)
    if fresh:
        set_session_cookie(response, request, signer, session)
    return response


def attempt(errors: Errors, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """Run a field parser, recording its FieldError in `errors` instead of raising."""
    try:
        return fn(*args, **kwargs)
    except FieldError as error:
        errors.setdefault(error.field, []).append(error.message)
        return None


def link_filters(values: dict[str, str]) -> dict[str, str]:
    """The list's filters as link parameters (without the page cursor)."""
    return {k: v for k, v in values.items() if k != "cursor" and v}


def render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    """A console page; a pending flash message is shown once and then forgotten."""
    viewer: Viewer | None = getattr(request.state, "console_viewer", None)
    flash = getattr(request.state, "console_flash", None)
    context = app_context(request)
    values.setdefault("errors", {})
    html = templates.get_template(f"console/{template}").render(
        viewer=viewer,
        u=viewer.url if viewer else plain_url,
        flash=flash,
        sandbox=context.settings.powers.sandbox_routes,
        now=context.clock.now(),
        **values,
    )
    response = HTMLResponse(html, status_code=status)
    if flash is not None or FLASH_COOKIE_NAME in request.cookies:
        clear_cookies(response, request, flash_only=True)
    return response


def error_page(request: Request, error: PageError) -> HTMLResponse:
    """The error page for a status, with the navigation when signed in."""
    back = "/console" if getattr(request.state, "console_viewer", None) else "/console/login"
    return render(
        request,
        "error.html",
        error.status,
        title=error.title,
        message=error.message,
        code=error.status,
        back=back,
        section="",
    )


async def redirect_with_flash(
    request: Request, viewer: Viewer, url: str, message: str, kind: str = "success"
) -> RedirectResponse:
    """303 to `url`, which shows `message` once."""
    response = RedirectResponse(url, status_code=303)
    set_flash(response, request, viewer.signer, app_context(request).clock.now(), kind, message)
    return response
