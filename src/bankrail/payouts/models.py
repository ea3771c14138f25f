"""Payouts in plain Python: how API v1 names the rails' lifecycle, and what a payout request
becomes at acceptance.

A payout follows the rails' lifecycle (`rails.lifecycle`). v1 shows its steps as events
`payout_authorised`, `payout_submitted`, `payout_settled`, and a failure as `payout_rejected`
(insufficient funds, AML) or `payout_failed` (anything else).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bankrail.core.problems import InvalidParameters, NotFound, ProblemError, invalid_field
from bankrail.merchants.models import AccountFacts, AccountIdentifiers
from bankrail.payouts.verification import VerifiedStage, check_selection
from bankrail.rails.lifecycle import REJECTIONS, FailureReason, RailState, Stage
from bankrail.rails.providers import VERIFIED_PAYOUT_PROVIDERS
from bankrail.rails.schemes import SchemeUnavailable, choose_scheme


def v1_status(state: RailState) -> str:
    """The status API v1 shows in transaction records."""
    return {
        Stage.PENDING: "pending",
        Stage.AUTHORIZED: "authorised",
        Stage.SUBMITTED: "submitted",
        Stage.EXECUTED: "settled",
    }.get(state.stage) or ("rejected" if state.failure_reason in REJECTIONS else "failed")


def v1_reason(reason: FailureReason) -> str:
    """A failure reason as API v1 names it."""
    if reason is FailureReason.BLOCKED:
        return "aml_check_failed"
    if reason in (FailureReason.SERVER_ERROR, FailureReason.INSUFFICIENT_FUNDS):
        return reason.value
    # invalid_iban, and the verification reasons (verified payouts are v3 only).
    return "scheme_error"


# Acceptance: what a payout request becomes, decided from what one read found.

OPEN_LOOP_FIELD = "beneficiary.account_identifier"
CLOSED_LOOP_FIELD = "beneficiary.payment_source_id"


def check_route(currency: str, identifiers: AccountIdentifiers, field: str) -> None:
    """GBP pays a UK account (sort code or GB IBAN); EUR pays a non-GB IBAN (spec 2.4.1)."""
    if identifiers.sort_code is not None:
        if currency != "GBP":
            raise invalid_field(field, "sort code and account number accounts are paid in GBP")
        return
    country = identifiers.iban[:2]
    if currency == "GBP" and country != "GB":
        raise invalid_field(field, "GBP payouts go to a UK account (sort code or GB IBAN)")
    if currency == "EUR" and country == "GB":
        raise invalid_field(field, "EUR payouts go to a non-GB IBAN")
    if currency not in ("GBP", "EUR"):
        raise invalid_field("currency", "payouts are made in GBP or EUR")


def stored_open_loop(
    beneficiary: dict[str, Any], identifiers: AccountIdentifiers
) -> dict[str, Any]:
    """The beneficiary as kept on an open-loop payout."""
    stored = {k: v for k, v in beneficiary.items() if v is not None}
    if stored["account_identifier"]["type"] == "iban":
        stored["account_identifier"] = {"type": "iban", "iban": identifiers.iban}
    stored["account_identifiers"] = identifiers.as_list()
    return stored


@dataclass(frozen=True)
class PayoutRequest:
    """A request to create a payout, parsed and authenticated, from either API.

    `account_id` names the paying account (v3); without it the merchant's first account in
    `currency` pays (v1). `identifiers` are the open-loop payee's, normalised, or the problem
    that normalising them raised (decided in the rules' order); None for a closed-loop
    `payment_source` beneficiary, which the source's own identifiers route.
    """

    api: str
    merchant_id: uuid.UUID
    account_id: uuid.UUID | None
    currency: str
    amount: int
    beneficiary: dict[str, Any]
    identifiers: AccountIdentifiers | ProblemError | None
    field: str
    reference: str
    now: datetime
    transaction_id: uuid.UUID | None = None
    context_code: str | None = None
    metadata: dict[str, str] | None = None
    # v3: `scheme_selection` and `sub_merchants` as sent (None: not sent).
    scheme_selection: dict[str, Any] | None = None
    sub_merchants: dict[str, Any] | None = None
    # Chosen before acceptance when the answer names it (a verified payout's resource token).
    payout_id: uuid.UUID | None = None

    @property
    def verified(self) -> bool:
        """A `user_determined` payout: the payee chooses and proves the account."""
        return bool(self.beneficiary["type"] == "user_determined")

    @property
    def closed_loop(self) -> bool:
        """A payout back to a payment source the user paid from."""
        return bool(self.beneficiary["type"] == "payment_source")

    @property
    def payee_identifiers(self) -> AccountIdentifiers | None:
        """The identifiers to look the payee up by (open loop, when valid)."""
        return self.identifiers if isinstance(self.identifiers, AccountIdentifiers) else None


@dataclass(frozen=True)
class SourceFacts:
    """A payment source the user paid into the account from (closed loop)."""

    id: uuid.UUID
    user_id: str
    account_holder_name: str
    identifiers: AccountIdentifiers


@dataclass(frozen=True)
class PayoutFacts:
    """What the acceptance read found for one request, besides its idempotency key."""

    account: AccountFacts | None
    source: SourceFacts | None
    # The account at Bankrail that the payee's identifiers name, and its currency.
    payee: tuple[uuid.UUID, str] | None
    screened: bool


@dataclass(frozen=True)
class NewPayout:
    """An accepted payout, as it is to be written."""

    id: uuid.UUID
    account: AccountFacts
    name: str
    identifiers: AccountIdentifiers
    beneficiary: dict[str, Any]
    destination_account_id: uuid.UUID | None
    pending_failure: FailureReason | None
    # A verified payout waits for its payee (`verification.VerifiedStage`) on the scheme
    # its provider selection decided.
    stage: str = Stage.PENDING.value
    scheme: str | None = None

    @property
    def holds_funds(self) -> bool:
        """True when its funds are held at acceptance (it fails later otherwise)."""
        return self.pending_failure is None


# The payout rules in the order they are checked; `_paying_account` and `_payee` hold theirs.
def decide_payout(
    request: PayoutRequest, facts: PayoutFacts, available: int, payout_id: uuid.UUID
) -> NewPayout:
    """The payout a request creates, given what the read found and the account's available
    funds left by the requests accepted before it; raises ProblemError for a request that
    creates nothing (in the order the rules are checked). Insufficient funds and a screened
    beneficiary are not errors: the payout is accepted and fails asynchronously."""
    account = _paying_account(request, facts)
    if request.verified:
        return _verified_payout(request, facts, available, payout_id)
    identifiers, name, beneficiary = _payee(request, facts)
    check_route(account.currency, identifiers, request.field)
    # A payee at Bankrail in the currency is paid by internal transfer; the paying account
    # itself included (docs/api.md: its hold returns to its available balance).
    payee = facts.payee if facts.payee and facts.payee[1] == account.currency else None
    try:
        scheme = choose_scheme(account.currency, payee is not None, request.scheme_selection)
    except SchemeUnavailable as exc:
        raise invalid_field("scheme_selection.scheme_id", str(exc)) from exc
    pending_failure = _pending_failure(facts, available, request.amount)
    return NewPayout(
        id=payout_id,
        account=account,
        name=name,
        identifiers=identifiers,
        beneficiary=beneficiary,
        destination_account_id=payee[0] if payee else None,
        pending_failure=pending_failure,
        scheme=scheme,
    )


def _paying_account(request: PayoutRequest, facts: PayoutFacts) -> AccountFacts:
    """The account the request pays from: 404 for an account not the merchant's, 400 when
    the merchant has none in the currency (v1) or the currency is not the account's."""
    account = facts.account
    if account is None:
        if request.account_id is not None:
            raise NotFound(f"Merchant account {request.account_id} not found.")
        raise invalid_field("currency", f"the merchant has no {request.currency} account")
    if request.currency != account.currency:
        raise invalid_field(
            "currency", f"must be {account.currency}, the merchant account's currency"
        )
    return account


def _payee(
    request: PayoutRequest, facts: PayoutFacts
) -> tuple[AccountIdentifiers, str, dict[str, Any]]:
    """Whom an unverified payout pays: its identifiers, account holder's name and the
    beneficiary as stored. A closed loop's is the payment source the user paid from into
    the account (400 when there is none); an open loop's is the request's own."""
    if not request.closed_loop:
        if isinstance(request.identifiers, ProblemError):
            raise request.identifiers
        assert request.identifiers is not None
        identifiers = request.identifiers
        return (
            identifiers,
            request.beneficiary["account_holder_name"],
            stored_open_loop(request.beneficiary, identifiers),
        )
    source = facts.source
    if source is None:
        raise InvalidParameters(
            "The payment source did not pay into this merchant account for this user.",
            {
                CLOSED_LOOP_FIELD: [
                    "no settled payment from this user and source into this merchant account"
                ]
            },
        )
    beneficiary: dict[str, Any] = {
        "type": "payment_source",
        "user_id": source.user_id,
        "payment_source_id": str(source.id),
        "reference": request.beneficiary["reference"],
        "account_holder_name": source.account_holder_name,
        "account_identifiers": source.identifiers.as_list(),
    }
    return source.identifiers, source.account_holder_name, beneficiary


def _pending_failure(facts: PayoutFacts, available: int, amount: int) -> FailureReason | None:
    if facts.screened:
        return FailureReason.BLOCKED
    if available < amount:
        return FailureReason.INSUFFICIENT_FUNDS
    return None


def _verified_payout(
    request: PayoutRequest, facts: PayoutFacts, available: int, payout_id: uuid.UUID
) -> NewPayout:
    """A `user_determined` payout: no account yet (the payee chooses it at the payout page),
    funds held at once as for any payout, waiting in `authorization_required`."""
    assert facts.account is not None
    beneficiary = request.beneficiary
    scheme = check_selection(
        beneficiary["provider_selection"], facts.account.currency, VERIFIED_PAYOUT_PROVIDERS
    )
    return NewPayout(
        id=payout_id,
        account=facts.account,
        name=beneficiary["user"]["name"],
        identifiers=AccountIdentifiers("", None, None),
        beneficiary=_without_nulls(beneficiary),
        destination_account_id=None,
        pending_failure=_pending_failure(facts, available, request.amount),
        stage=VerifiedStage.AUTHORIZATION_REQUIRED.value,
        scheme=scheme,
    )


def _without_nulls(value: Any) -> Any:
    """A request object as stored and read back: `null` members are absent (fidelity 0)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
