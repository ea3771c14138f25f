"""Creating payments that a payer authorises at their bank: the one path of every such payment
created, whatever the API (`POST /v3/payments`, the legacy deposits).

`create_payments` reads what the rules need for a batch of requests in one statement (the keys'
locks and stored answers, the receiving accounts), decides each with `plan_payment`, and writes
the payments, their expiry jobs and the answers under their keys in one statement, in the
caller's transaction (this module's read, rules and write, `STEPS`, run by the one keyed batch
core, security/keyed_batch.py); a batch of one is the general case. `PaymentCreation` runs it
as group commit within one process. (A payment on a mandate is another operation: `service.py`.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from bankrail.core.ids import new_id
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import (
    IDEMPOTENCY_REUSE,
    NotFound,
    ProblemType,
    invalid_field,
)
from bankrail.core.timefmt import iso_utc
from bankrail.core.urls import is_absolute_http_uri
from bankrail.db.pool import Connection, Pool
from bankrail.payments.authorization import CONSENT_REQUESTED, check_provider
from bankrail.payments.jobs import EXPIRE_JOB
from bankrail.payments.models import PaymentState, PaymentStatus
from bankrail.payments.schemas import EXTERNAL_ACCOUNT_CURRENCIES, PaymentRequest
from bankrail.rails.providers import CATALOGUE, search
from bankrail.security.idempotency import (
    AnswersToStore,
    KeyedRequest,
    ProblemRenderer,
    key_item,
)
from bankrail.security.keyed_batch import Answer, Decided, KeyedAcceptor, decide_batch

__all__ = [
    "Journey",
    "NewPayment",
    "PaymentCreation",
    "PaymentToCreate",
    "create_payments",
    "created_answer",
    "plan_payment",
    "return_uris",
]


@dataclass(frozen=True)
class NewPayment:
    """A payment decided: the row to write."""

    id: uuid.UUID
    merchant_id: uuid.UUID
    account_id: uuid.UUID | None  # None: paid to an external account
    amount: int
    currency: str
    user_id: str
    user_details: dict[str, Any]
    selection_type: str
    selection_filter: dict[str, Any] | None
    provider_id: str | None
    scheme_id: str | None
    metadata: dict[str, Any] | None
    state: PaymentState
    sent: dict[str, Any] = field(default_factory=dict)
    return_uri: str | None = None
    # The payer's next action, when the journey started at creation (`authorization_flow`).
    next_action: dict[str, Any] | None = None
    # The journey's progress (`flow`): the consent the start request declared.
    flow: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The columns the payer's journey reads (`authorization.next_action`)."""
        return {
            "id": self.id,
            "currency": self.currency,
            "provider_id": self.provider_id,
            "scheme_id": self.scheme_id,
            "selection_filter": self.selection_filter,
            "flow": self.flow,
        }


# The answer of a new payment (status and JSON value), made by the caller.
Respond = Callable[[NewPayment], tuple[int, Any]]
# The next action of a payer's journey started at creation, for the payment's columns.
Journey = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class PaymentToCreate:
    """A request to create a payment; `keyed` None: the caller stores its answer, if any."""

    request: PaymentRequest
    merchant_id: uuid.UUID
    now: datetime
    respond: Respond
    keyed: KeyedRequest | None = None
    journey: Journey | None = None
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE
    store_client_errors: bool = True


@dataclass(frozen=True)
class Account:
    """What the rules need of the receiving account."""

    id: uuid.UUID
    currency: str


def _provider_and_scheme(
    request: PaymentRequest, currency: str
) -> tuple[str, str | None, str | None]:
    """The request's provider selection type, provider and scheme (the preselected provider's
    preferred scheme when none is named), in `currency`; 400 naming the field when they do
    not go together."""
    selection = request.payment_method.provider_selection
    selection_type = selection.type if selection else "user_selected"
    provider_id = selection.provider_id if selection else None
    scheme_id = selection.scheme_id if selection else None
    flat_scheme = request.payment_method.scheme_selection or (
        selection.scheme_selection if selection else None
    )
    if flat_scheme is not None and flat_scheme.scheme_id is not None:
        if flat_scheme.type != "preselected":
            raise invalid_field(
                "payment_method.scheme_selection.scheme_id",
                "may be given only when the scheme_selection type is preselected",
            )
        scheme_id = scheme_id or flat_scheme.scheme_id
    field_name = "payment_method.provider_selection"
    if selection_type == "preselected":
        if provider_id is None:
            raise invalid_field(
                f"{field_name}.provider_id", "required when the type is preselected"
            )
        provider = check_provider(provider_id, scheme_id, currency, f"{field_name}.")
        scheme_id = scheme_id or provider.schemes[0]  # the provider's preferred scheme
    elif scheme_id is not None and not any(
        scheme_id in p.schemes
        for p in search(CATALOGUE, currencies=[currency], release_channel="alpha")
    ):
        raise invalid_field(
            "payment_method.scheme_selection.scheme_id",
            f"no provider offers {scheme_id} for {currency}",
        )
    elif provider_id is not None:
        raise invalid_field(
            f"{field_name}.provider_id", "may be given only when the type is preselected"
        )
    elif scheme_id is not None and selection is not None and selection.scheme_id is not None:
        raise invalid_field(
            f"{field_name}.scheme_id", "may be given only when the type is preselected"
        )
    return selection_type, provider_id, scheme_id


def plan_payment(
    request: PaymentRequest, merchant_id: uuid.UUID, account: Account | None, now: datetime
) -> NewPayment:
    """The payment a request creates into `account` (None: not the merchant's, or none; or
    a payment to an external account, which needs none); 404 or 400 naming the field when
    the request cannot be accepted. With `authorization_flow` the payer's journey starts at
    once (the state machine's `start_authorization`): the payment is `authorizing`."""
    currency = _checked_currency(request, account)
    selection = request.payment_method.provider_selection
    selection_type, provider_id, scheme_id = _provider_and_scheme(request, currency)
    user = request.user.model_dump(exclude_none=True) if request.user else {}
    user_id = user.pop("id", None) or str(uuid.uuid4())
    state = PaymentState(
        PaymentStatus.AUTHORIZATION_REQUIRED, now, retry=request.payment_method.retry is not None
    )
    return_uri = _return_uri(request)
    flow: dict[str, Any] = {}
    if request.authorization_flow is not None:
        state = state.start_authorization()
        if request.authorization_flow.consent is not None:
            flow = {"consent": CONSENT_REQUESTED}
    return NewPayment(
        id=new_id(),
        merchant_id=merchant_id,
        account_id=account.id if account else None,
        amount=request.amount_in_minor,
        currency=request.currency,
        user_id=user_id,
        user_details=user,
        selection_type=selection_type,
        selection_filter=(
            selection.filter.model_dump(exclude_none=True)
            if selection and selection.filter
            else None
        ),
        provider_id=provider_id,
        scheme_id=scheme_id,
        metadata=request.metadata,
        state=state,
        sent=request.echo(),
        return_uri=return_uri,
        flow=flow,
    )


def _checked_currency(request: PaymentRequest, account: Account | None) -> str:
    """The payment's currency: the receiving account's, or for an external account one of
    `EXTERNAL_ACCOUNT_CURRENCIES`; 404/400 otherwise."""
    if request.account_id is None:
        if request.currency not in EXTERNAL_ACCOUNT_CURRENCIES:
            allowed = ", ".join(sorted(EXTERNAL_ACCOUNT_CURRENCIES))
            raise invalid_field("currency", f"must be one of {allowed}")
        return request.currency
    if account is None:
        raise NotFound(f"Merchant account {request.account_id} not found.")
    if request.currency != account.currency:
        raise invalid_field("currency", f"must be {account.currency}, the account's currency")
    return account.currency


def _return_uri(request: PaymentRequest) -> str | None:
    """Where the payer returns, when the creation says it (`authorization_flow.redirect`,
    else `hosted_page`); 400 naming the field unless every one is an absolute http(s) URI."""
    uris = return_uris(request)
    for field_name, uri in uris:
        if not is_absolute_http_uri(uri):
            raise invalid_field(field_name, "must be an absolute http(s) URI")
    return uris[0][1] if uris else None


def created_answer(payment: NewPayment, resource_token: str, public_url: str) -> dict[str, Any]:
    """The 201 answer of a new payment (spec 2.6): with the journey's next action when it
    started at creation (fidelity P3), with the hosted payment page's link when the request
    asked for it (fidelity P4; the parameters travel in the fragment, as the SDKs' links)."""
    answer: dict[str, Any] = {
        "id": str(payment.id),
        "user": {"id": payment.user_id},
        "resource_token": resource_token,
        "status": payment.state.status.value,
    }
    if payment.next_action is not None:
        answer["authorization_flow"] = {"actions": {"next": payment.next_action}}
    hosted = payment.sent.get("hosted_page")
    if hosted is not None:
        fragment = urlencode(
            {
                "payment_id": str(payment.id),
                "resource_token": resource_token,
                "return_uri": hosted["return_uri"],
            }
        )
        answer["hosted_page"] = {"uri": f"{public_url}/hpp/payments#{fragment}"}
    return answer


def return_uris(request: PaymentRequest) -> list[tuple[str, str]]:
    """The return URIs a creation names, each with its field (for the production mode's
    allow-list check)."""
    found: list[tuple[str, str]] = []
    flow = request.authorization_flow
    if flow is not None and flow.redirect is not None:
        found.append(("authorization_flow.redirect.return_uri", flow.redirect.return_uri))
    if request.hosted_page is not None:
        found.append(("hosted_page.return_uri", request.hosted_page.return_uri))
    return found


_READ = "SELECT * FROM bankrail_read_payment_requests($1::jsonb)"
_WRITE = "SELECT bankrail_write_payment_creations($1, $2, $3)"


class _Steps:
    """Payment creation's read, rules and write (security/keyed_batch.py); the batch's
    state is the rows of the payments to write."""

    async def read(
        self, conn: Connection, batch: Sequence[PaymentToCreate]
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """The keys' locks and stored answers, and the receiving accounts."""
        return await conn.fetch(_READ, [_read_item(item) for item in batch]), []

    async def decide(
        self, item: PaymentToCreate, row: Any, payments: list[dict[str, Any]]
    ) -> tuple[Answer, NewPayment]:
        """`plan_payment`, with the payer's next action when its journey starts at creation
        (`authorization_flow`); the caller's answer and the payment."""
        account = Account(row["account_id"], row["account_currency"]) if row["account_id"] else None
        payment = plan_payment(item.request, item.merchant_id, account, item.now)
        if item.journey is not None and payment.state.status is PaymentStatus.AUTHORIZING:
            payment = replace(payment, next_action=item.journey(payment.row()))
        status, value = item.respond(payment)
        payments.append(_payment_row(payment))
        return (status, dumps(value)), payment

    async def write(
        self, conn: Connection, payments: list[dict[str, Any]], answers: AnswersToStore
    ) -> None:
        """The payments, their expiry jobs and the answers, in one statement."""
        await conn.execute(_WRITE, payments, EXPIRE_JOB, answers.rows)


STEPS = _Steps()


async def create_payments(
    conn: Connection,
    batch: Sequence[PaymentToCreate],
    render_problem: ProblemRenderer | None = None,
) -> list[Decided[NewPayment]]:
    """Create payments, in the caller's transaction, and return each request's outcome in
    order with the payment it created (None when it created none): the answer (stored under
    its key, if it has one: a 201, or a 4xx problem), or a problem not stored (the key in
    flight, reused with another request, or, for a request without a key, any problem)."""
    return await decide_batch(conn, STEPS, batch, render_problem)


def _read_item(item: PaymentToCreate) -> dict[str, Any]:
    return {
        **key_item(item.keyed),
        "merchant_id": str(item.merchant_id),
        "account_id": item.request.account_id,
    }


def _payment_row(payment: NewPayment) -> dict[str, Any]:
    state = payment.state
    return {
        "id": str(payment.id),
        "merchant_id": str(payment.merchant_id),
        "account_id": str(payment.account_id) if payment.account_id else None,
        "amount": payment.amount,
        "currency": payment.currency,
        "user_id": payment.user_id,
        "user_details": payment.user_details,
        "selection_type": payment.selection_type,
        "selection_filter": payment.selection_filter,
        "provider_id": payment.provider_id,
        "scheme_id": payment.scheme_id,
        "metadata": payment.metadata,
        "status": state.status.value,
        "created_at": iso_utc(state.created_at),
        "history": [
            {"status": status, "at": iso_utc(state.created_at)}
            for status in _statuses_at_creation(state)
        ],
        "expires_at": iso_utc(state.expires_at()),
        "sent": payment.sent,
        "return_uri": payment.return_uri,
        "next_action": payment.next_action,
        "flow": payment.flow,
    }


def _statuses_at_creation(state: PaymentState) -> list[str]:
    """The statuses a new payment went through: `authorization_required`, then
    `authorizing` when its journey started at creation."""
    first = PaymentStatus.AUTHORIZATION_REQUIRED.value
    return [first] if state.status.value == first else [first, state.status.value]


class PaymentCreation(KeyedAcceptor[PaymentToCreate, list[dict[str, Any]], NewPayment]):
    """Group commit of payment requests within one process (security/keyed_batch.py): the
    way `create_payments` is run for requests under an Idempotency-Key. `accept` hands back
    the answer once committed and raises the problems that are not stored."""

    def __init__(self, pool: Pool, render_problem: ProblemRenderer, max_batch: int = 64) -> None:
        super().__init__(pool, STEPS, render_problem, max_batch)
