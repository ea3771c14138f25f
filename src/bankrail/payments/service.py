"""Pay-ins in PostgreSQL: creation, the authorisation journey, the bank's steps, expiry.

Every step locks the payment row, checks the state machine, and writes its ledger postings,
activity and events in the same transaction, so a retried bank action or a duplicate job can
never settle or credit a payment twice.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from bankrail.core.ids import new_id
from bankrail.core.problems import Conflict, InvalidParameters, NotFound, invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.core.urls import is_absolute_http_uri, with_query
from bankrail.db.pool import Connection
from bankrail.events.outbox import record_event
from bankrail.jobs.queue import enqueue
from bankrail.merchants.activity import record_activity
from bankrail.merchants.balances import credit_from_clearing
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.return_uris import NOT_ALLOWED, allowed_return_uris, is_allowed
from bankrail.merchants.service import get_account, require_account
from bankrail.payments.models import (
    ANNOUNCED,
    AUTHORIZATION_WINDOW,
    CANCELLABLE,
    EXPIRABLE,
    FailureReason,
    InvalidTransition,
    PaymentState,
    PaymentStatus,
)
from bankrail.payments.providers import Provider, find_provider, search
from bankrail.payments.schemas import PaymentRequest
from bankrail.payments.sources import get_payment_source, record_payment_source
from bankrail.rails.mock_bank import remitter_for
from bankrail.security.tokens import TokenIssuer

ADVANCE_JOB = "payment.advance"
EXPIRE_JOB = "payment.expire"

PAYMENT_COLUMNS = (
    "id, merchant_id, merchant_account_id, amount_in_minor, currency, user_id, user_details,"
    " selection_type, selection_filter, provider_id, scheme_id, metadata, return_uri, status,"
    " failure_stage, failure_reason, payment_source_id, bank_action, created_at, authorized_at,"
    " executed_at, settled_at, failed_at, history, refunded_amount_in_minor"
)


def check_return_uri(uri: str, field: str) -> str:
    """An absolute http(s) URI, or 400."""
    if not is_absolute_http_uri(uri):
        raise invalid_field(field, "must be an absolute http(s) URI")
    return uri


async def require_allowed_return_uri(
    conn: Connection, merchant_id: uuid.UUID, uri: str, field: str
) -> None:
    """400 naming `field` unless the merchant's allowed return URIs cover `uri`."""
    if not is_allowed(uri, await allowed_return_uris(conn, merchant_id)):
        raise invalid_field(field, NOT_ALLOWED)


def _check_provider(
    provider_id: str, scheme_id: str | None, currency: str, prefix: str = ""
) -> Provider:
    provider = find_provider(provider_id)
    if provider is None:
        raise invalid_field(f"{prefix}provider_id", f"unknown provider {provider_id!r}")
    if not provider.serves(currency):
        raise invalid_field(f"{prefix}provider_id", f"{provider_id} does not serve {currency}")
    if scheme_id is not None and scheme_id not in provider.schemes:
        raise invalid_field(f"{prefix}scheme_id", f"{provider_id} does not offer {scheme_id}")
    return provider


async def create_payment(
    conn: Connection, merchant_id: uuid.UUID, request: PaymentRequest, now: datetime
) -> dict[str, Any]:
    """Record a new payment awaiting authorisation; 400/404 for a bad request."""
    account = await require_account(conn, uuid.UUID(request.account_id), merchant_id)
    if request.currency != account.currency:
        raise invalid_field("currency", f"must be {account.currency}, the account's currency")
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
    field = "payment_method.provider_selection"
    if selection_type == "preselected":
        if provider_id is None:
            raise invalid_field(f"{field}.provider_id", "required when the type is preselected")
        provider = _check_provider(provider_id, scheme_id, account.currency, f"{field}.")
        scheme_id = scheme_id or provider.schemes[0]  # the provider's preferred scheme
    elif scheme_id is not None and not any(
        scheme_id in p.schemes
        for p in search(currencies=[account.currency], release_channel="alpha")
    ):
        raise invalid_field(
            "payment_method.scheme_selection.scheme_id",
            f"no provider offers {scheme_id} for {account.currency}",
        )
    elif provider_id is not None:
        raise invalid_field(
            f"{field}.provider_id", "may be given only when the type is preselected"
        )
    elif scheme_id is not None and selection is not None and selection.scheme_id is not None:
        raise invalid_field(f"{field}.scheme_id", "may be given only when the type is preselected")
    user = request.user.model_dump(exclude_none=True) if request.user else {}
    user_id = user.pop("id", None) or str(uuid.uuid4())
    payment_id = new_id()
    state = PaymentState(PaymentStatus.AUTHORIZATION_REQUIRED, now)
    await conn.execute(
        "INSERT INTO payments (id, merchant_id, merchant_account_id, amount_in_minor, currency,"
        " user_id, user_details, selection_type, selection_filter, provider_id, scheme_id,"
        " metadata, status, created_at, history)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        payment_id,
        merchant_id,
        account.id,
        request.amount_in_minor,
        request.currency,
        user_id,
        user,
        selection_type,
        selection.filter.model_dump(exclude_none=True) if selection and selection.filter else None,
        provider_id,
        scheme_id,
        request.metadata,
        state.status.value,
        now,
        [{"status": state.status.value, "at": iso_utc(now)}],
    )
    await enqueue(conn, EXPIRE_JOB, {"payment_id": str(payment_id)}, state.expires_at())
    return {"id": payment_id, "user_id": user_id}


async def lock_payment(
    conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID | None = None
) -> Any:
    """The payment row, locked for the transaction; 404 when absent or another merchant's."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1"
        " AND ($2::uuid IS NULL OR merchant_id = $2) FOR UPDATE",
        payment_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Payment {payment_id} not found.")
    return row


def state_of(row: Any) -> PaymentState:
    """The lifecycle state of a payments row."""
    return PaymentState(
        status=PaymentStatus(row["status"]),
        created_at=row["created_at"],
        authorized_at=row["authorized_at"],
        executed_at=row["executed_at"],
        settled_at=row["settled_at"],
        failed_at=row["failed_at"],
        failure_stage=PaymentStatus(row["failure_stage"]) if row["failure_stage"] else None,
        failure_reason=FailureReason(row["failure_reason"]) if row["failure_reason"] else None,
    )


def _conflict(exc: InvalidTransition) -> Conflict:
    return Conflict(f"This action is not possible now: {exc}.")


async def _save(
    conn: Connection,
    row: Any,
    state: PaymentState,
    now: datetime,
    **extra: Any,
) -> Any:
    """Persist a new state (and extra columns), append history, announce it if due."""
    columns = {
        "status": state.status.value,
        "authorized_at": state.authorized_at,
        "executed_at": state.executed_at,
        "settled_at": state.settled_at,
        "failed_at": state.failed_at,
        "failure_stage": state.failure_stage.value if state.failure_stage else None,
        "failure_reason": state.failure_reason.value if state.failure_reason else None,
        **extra,
    }
    names = list(columns)
    assignments = ", ".join(f"{name} = ${i + 2}" for i, name in enumerate(names))
    changed = state.status.value != row["status"]
    history_sql = (
        f", history = history || jsonb_build_array(jsonb_build_object('status', "
        f"${len(names) + 2}::text, 'at', ${len(names) + 3}::text))"
        if changed
        else ""
    )
    args: list[Any] = [row["id"], *columns.values()]
    if changed:
        args += [state.status.value, iso_utc(now)]
    updated = await conn.fetchrow(
        f"UPDATE payments SET {assignments}{history_sql} WHERE id = $1 RETURNING {PAYMENT_COLUMNS}",
        *args,
    )
    if changed and state.status in ANNOUNCED:
        await _announce(conn, updated, state)
    return updated


def _payment_method(row: Any) -> dict[str, Any]:
    method: dict[str, Any] = {"type": "bank_transfer"}
    if row["provider_id"]:
        method["provider_id"] = row["provider_id"]
    if row["scheme_id"]:
        method["scheme_id"] = row["scheme_id"]
    return method


async def _announce(conn: Connection, row: Any, state: PaymentState) -> None:
    body: dict[str, Any] = {
        "payment_id": str(row["id"]),
        "payment_method": _payment_method(row),
        "metadata": row["metadata"] or {},
    }
    if state.status is PaymentStatus.EXECUTED:
        assert state.executed_at is not None
        body["executed_at"] = iso_utc(state.executed_at)
    elif state.status is PaymentStatus.SETTLED:
        assert state.settled_at is not None
        body["settled_at"] = iso_utc(state.settled_at)
        body["user_id"] = row["user_id"]
        body["payment_source"] = await _source_document(conn, row["payment_source_id"])
    else:
        assert state.failed_at is not None
        assert state.failure_stage is not None
        body["failed_at"] = iso_utc(state.failed_at)
        body["failure_stage"] = state.failure_stage.value
        body["failure_reason"] = state.failure_reason.value if state.failure_reason else None
    await record_event(
        conn,
        merchant_id=row["merchant_id"],
        family="payments",
        event_type=state.status.value,
        body=body,
        now=state.failed_at or state.settled_at or state.executed_at or state.created_at,
    )


async def _source_document(conn: Connection, source_id: uuid.UUID | None) -> dict[str, Any] | None:
    source = await get_payment_source(conn, source_id) if source_id else None
    return source.to_api() if source else None


def offered_providers(row: Any) -> list[Provider]:
    """The providers a `user_selected` payment offers its payer."""
    chosen = row["selection_filter"] or {}
    found = search(
        currencies=[row["currency"]],
        countries=chosen.get("countries"),
        customer_segments=chosen.get("customer_segments"),
        release_channel=chosen.get("release_channel"),
    )
    allowed = chosen.get("provider_ids")
    scheme = row["scheme_id"]
    return [
        p
        for p in found
        if (allowed is None or p.id in allowed) and (scheme is None or scheme in p.schemes)
    ]


def provider_token(tokens: TokenIssuer, payment_id: uuid.UUID, now: datetime) -> str:
    """The token of the mock bank's pages and action API for one payment; it lasts as long as
    the payer has to authorise."""
    return tokens.issue_resource_token(payment_id, now, AUTHORIZATION_WINDOW, kind="provider")


def next_action(row: Any, public_url: str, provider_token: str) -> dict[str, Any]:
    """What the payer must do next: pick a provider, go to the bank, or fill in a form."""
    if row["provider_id"] is None:
        return {
            "type": "provider_selection",
            "providers": [p.to_api(public_url) for p in offered_providers(row)],
        }
    provider = find_provider(row["provider_id"])
    assert provider is not None
    if provider.flow == "embedded":
        return {
            "type": "form",
            "inputs": [
                {
                    "type": "text",
                    "id": "psu-username",
                    "mandatory": True,
                    "display_text": "Username at the bank (test_executed, "
                    "test_authorisation_failed or test_execution_rejected)",
                },
                {
                    "type": "text",
                    "id": "psu-password",
                    "mandatory": True,
                    "sensitive": True,
                    "display_text": "Password (any)",
                },
            ],
        }
    uri = with_query(
        f"{public_url}/mock-bank/authorize", payment_id=str(row["id"]), token=provider_token
    )
    return {"type": "redirect", "uri": uri}


async def start_authorization(
    conn: Connection,
    row: Any,
    *,
    return_uri: str | None,
    now: datetime,
    allow_listed_only: bool,
    field: str = "redirect.return_uri",
) -> Any:
    """The payer starts the journey: the payment becomes `authorizing`.

    `return_uri`, where the bank sends the payer back, must be an absolute http(s) URI; with
    `allow_listed_only` (production mode, for a URI the caller chose) one that the merchant's
    allowed return URIs cover, else 400 naming `field`.
    """
    if return_uri is not None:
        check_return_uri(return_uri, field)
        if allow_listed_only:
            await require_allowed_return_uri(conn, row["merchant_id"], return_uri, field)
    state = state_of(row)
    try:
        state = state.start_authorization()
    except InvalidTransition as exc:
        raise _conflict(exc) from exc
    return await _save(conn, row, state, now, return_uri=return_uri or row["return_uri"])


async def select_provider(
    conn: Connection, row: Any, provider_id: str, scheme_id: str | None, now: datetime
) -> Any:
    """Record the provider the payer chose from those offered."""
    if state_of(row).status is not PaymentStatus.AUTHORIZING or row["provider_id"] is not None:
        raise Conflict("A provider can be chosen only while authorizing, and only once.")
    provider = _check_provider(provider_id, scheme_id, row["currency"])
    if row["scheme_id"] is not None and row["scheme_id"] not in provider.schemes:
        raise invalid_field(
            "provider_id", f"{provider_id} does not offer the payment's scheme {row['scheme_id']}"
        )
    if provider.id not in {p.id for p in offered_providers(row)}:
        raise invalid_field("provider_id", f"{provider_id} is not offered for this payment")
    return await _save(
        conn,
        row,
        state_of(row),
        now,
        provider_id=provider.id,
        scheme_id=scheme_id or row["scheme_id"] or provider.schemes[0],
    )


def redirect_back(row: Any) -> str:
    """The merchant's return URI with the payment id added."""
    uri = row["return_uri"]
    if not uri:
        return ""
    return with_query(uri, payment_id=str(row["id"]))


async def bank_action(
    conn: Connection,
    row: Any,
    action: str,
    now: datetime,
    *,
    execution_delay: int = 0,
    settlement_delay: int = 0,
) -> str:
    """Apply the payer's decision at the mock bank; returns where the payer goes next.

    Repeating the action already taken answers the same again and changes nothing; another
    action on a payment the bank already decided is a conflict.
    """
    if row["bank_action"] is not None:
        if row["bank_action"] == action:
            return redirect_back(row)
        raise Conflict(f"The bank already recorded {row['bank_action']} for this payment.")
    state = state_of(row)
    if state.status in EXPIRABLE and now >= state.expires_at():
        # The payer came back after the authorisation window: the payment expires now,
        # even if its expiry job has not run yet, and the payer is sent back.
        expired = await _save(conn, row, state.fail(now, FailureReason.EXPIRED), now)
        return redirect_back(expired)
    if state.status is not PaymentStatus.AUTHORIZING or row["provider_id"] is None:
        raise Conflict(f"The payment is {state.status}; the bank cannot act on it now.")
    if action == "Cancel":
        state = state.fail(now, FailureReason.USER_CANCELED_AT_PROVIDER)
    elif action == "RejectAuthorisation":
        state = state.fail(now, FailureReason.AUTHORIZATION_FAILED)
    else:
        state = state.authorize(now)
        await enqueue(
            conn,
            ADVANCE_JOB,
            {"payment_id": str(row["id"]), "settlement_delay": settlement_delay},
            now + timedelta(seconds=execution_delay),
        )
    updated = await _save(conn, row, state, now, bank_action=action)
    return redirect_back(updated)


async def advance_payment(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """The bank's next step after authorisation (a job handler)."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["payment_id"]),
    )
    if row is None:
        return
    state = state_of(row)
    if state.status is PaymentStatus.AUTHORIZED:
        if row["bank_action"] == "RejectExecution":
            await _save(conn, row, state.fail(now, FailureReason.PROVIDER_REJECTED), now)
            return
        await _save(conn, row, state.execute(now), now)
        delay = int(payload.get("settlement_delay", 0))
        await enqueue(
            conn, ADVANCE_JOB, {"payment_id": str(row["id"])}, now + timedelta(seconds=delay)
        )
    elif state.status is PaymentStatus.EXECUTED:
        await _settle(conn, row, state, now)


async def _settle(conn: Connection, row: Any, state: PaymentState, now: datetime) -> None:
    account = await get_account(conn, row["merchant_account_id"])
    assert account is not None
    remitter = remitter_for(row["user_id"], row["currency"], row["user_details"].get("name"))
    source = await record_payment_source(
        conn,
        merchant_id=row["merchant_id"],
        merchant_account_id=account.id,
        user_id=row["user_id"],
        account_holder_name=remitter.account_holder_name,
        identifiers=remitter.identifiers,
        payment_id=row["id"],
        now=now,
    )
    await credit_from_clearing(
        conn,
        account,
        rail=row["scheme_id"] or "bank_transfer",
        amount=row["amount_in_minor"],
        kind="payment",
        reference_id=row["id"],
        now=now,
    )
    await _record_activity(conn, row, account, source.id, now)
    await _save(conn, row, state.settle(now), now, payment_source_id=source.id)


async def _record_activity(
    conn: Connection,
    row: Any,
    account: MerchantAccount,
    source_id: uuid.UUID,
    now: datetime,
) -> None:
    await record_activity(
        conn,
        item_id=row["id"],
        merchant_account_id=account.id,
        type_="payment",
        amount=row["amount_in_minor"],
        currency=row["currency"],
        status="settled",
        now=now,
        details={
            "user_id": row["user_id"],
            "provider_id": row["provider_id"],
            "scheme_id": row["scheme_id"],
            "payment_source_id": str(source_id),
            "settled_at": iso_utc(now),
        },
    )


async def expire_payment(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """Fail a payment still unauthorised when its 15 minutes are up (a job handler)."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["payment_id"]),
    )
    if row is None:
        return
    state = state_of(row)
    if state.status in EXPIRABLE and now >= state.expires_at():
        await _save(conn, row, state.fail(now, FailureReason.EXPIRED), now)


async def cancel_payment(conn: Connection, row: Any, now: datetime) -> None:
    """The merchant cancels: fails with `canceled` at the current status."""
    state = state_of(row)
    if state.status not in CANCELLABLE:
        raise Conflict(f"A payment that is {state.status} can no longer be cancelled.")
    await _save(conn, row, state.fail(now, FailureReason.CANCELED), now, bank_action="Cancel")


async def render(conn: Connection, row: Any) -> dict[str, Any]:
    """The payment resource (spec 2.7 and docs/api.md)."""
    source = await _source_document(conn, row["payment_source_id"])
    return render_row(row, source)


def render_row(row: Any, payment_source: dict[str, Any] | None) -> dict[str, Any]:
    """The payment resource of a payments row whose payment source (if it has one) is
    `payment_source`."""
    state = state_of(row)
    selection: dict[str, Any] = {"type": row["selection_type"]}
    if row["provider_id"] and row["selection_type"] == "preselected":
        selection["provider_id"] = row["provider_id"]
    if row["selection_filter"]:
        selection["filter"] = row["selection_filter"]
    payment: dict[str, Any] = {
        "id": str(row["id"]),
        "amount_in_minor": row["amount_in_minor"],
        "currency": row["currency"],
        "user": {"id": row["user_id"]},
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": selection,
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": str(row["merchant_account_id"]),
            },
        },
        "merchant_account_id": str(row["merchant_account_id"]),
        "created_at": iso_utc(row["created_at"]),
        "status": state.status.value,
        "status_history": row["history"],
        "metadata": row["metadata"] or {},
        "refunded_amount_in_minor": row["refunded_amount_in_minor"],
    }
    if row["provider_id"]:
        payment["provider_id"] = row["provider_id"]
        payment["payment_method"]["provider_selection"]["provider_id"] = row["provider_id"]
    if row["scheme_id"]:
        payment["scheme_id"] = row["scheme_id"]
        payment["payment_method"]["provider_selection"]["scheme_id"] = row["scheme_id"]
    for column in ("authorized_at", "executed_at", "settled_at", "failed_at"):
        if row[column]:
            payment[column] = iso_utc(row[column])
    if state.status is PaymentStatus.FAILED:
        payment["failure_stage"] = row["failure_stage"]
        payment["failure_reason"] = row["failure_reason"]
    if payment_source is not None:
        payment["payment_source"] = payment_source
    return payment


async def get_payment_row(
    conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID | None
) -> Any:
    """The payment row without locking; 404 when absent or another merchant's."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments"
        " WHERE id = $1 AND ($2::uuid IS NULL OR merchant_id = $2)",
        payment_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Payment {payment_id} not found.")
    return row


def payment_id_from_return(query: str | None, fragment: str | None) -> uuid.UUID:
    """The payment id in what the payer's browser came back with; 400 if none."""
    for part in (query, fragment):
        if not part:
            continue
        values = parse_qs(part.lstrip("?#")).get("payment_id")
        if values:
            try:
                return uuid.UUID(values[0])
            except ValueError:
                break
    raise InvalidParameters(
        "No payment_id in the query or fragment.", {"query": ["must contain payment_id"]}
    )
