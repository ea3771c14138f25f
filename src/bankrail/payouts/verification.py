"""Verified payouts in plain Python: the payee chooses and proves the account a
`user_determined` payout pays, at the payout page (pages/hpp_payouts.py).

Before the rails' lifecycle (`rails.lifecycle`) a verified payout has two stages of its own:

    authorization_required --choose provider--> authorizing --payee authorises, verified--> pending
              |                                      |
              |                                      +--declined or not verified--> failed
              +--(either stage) the window closes (AUTHORIZATION_WINDOW)--> failed (expired)

From `pending` on it is any payout: authorised, submitted, executed (or failed) by the payout
job. The funds are held at acceptance, as for every payout, so a verified payout can never
execute unfunded; a failure before `pending` releases them. A payee who never acts does not
hold the money forever: when the payout page's window (`AUTHORIZATION_WINDOW`, the lifetime of
the payout's resource token) closes with the payout still before `pending`, its expiry job
(`EXPIRE_JOB`, queued at acceptance) fails it with `expired` (`expiry`).

Verification (docs/api.md, "Verified payouts"):
- name: with `verify_name`, the holder name of the account the payee chooses must be the
  payout's `user.name` once both are reduced to their skeletons (`rails.screening.name_skeleton`:
  case, accents, punctuation and look-alike characters do not count);
- transaction search: with `transaction_search_criteria`, the chosen account must have paid the
  merchant a settled pay-in of exactly `amount_in_minor` in `currency`, created on the
  `created_at` date (UTC), whose statement line contains at least one of `tokens` (case
  ignored). A pay-in's statement line reads the merchant's name, the payment id and the
  payment's metadata values (`rails.pay_ins`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from bankrail.core.problems import invalid_field
from bankrail.rails.lifecycle import FailureReason, InvalidTransition, Stage
from bankrail.rails.pay_ins import KnownAccount, PayIn
from bankrail.rails.providers import Provider, search
from bankrail.rails.screening import name_skeleton

SELECTION_FIELD = "beneficiary.provider_selection"


class VerifiedStage(StrEnum):
    """The stages of a verified payout before it joins the rails' lifecycle."""

    AUTHORIZATION_REQUIRED = "authorization_required"
    AUTHORIZING = "authorizing"


BEFORE_RAILS = frozenset(stage.value for stage in VerifiedStage)

# Why a verified payout fails before it reaches the rails.
DECLINED = FailureReason.AUTHORIZATION_FAILED
NAME_MISMATCH = FailureReason.NAME_VERIFICATION_FAILED
NO_MATCHING_PAY_IN = FailureReason.TRANSACTION_VERIFICATION_FAILED
NOT_ACTED_ON = FailureReason.EXPIRED

# How long the payee has to choose and prove an account: the lifetime of the payout's
# resource token, from the payout's creation (service time).
AUTHORIZATION_WINDOW = timedelta(days=7)
# The job, queued at acceptance for the window's end, that fails a payout still waiting.
EXPIRE_JOB = "payout.expire_authorization"


def selectable_providers(
    selection: dict[str, Any], currency: str, among: Iterable[Provider]
) -> list[Provider]:
    """The providers the payee may choose for a payout in `currency`: the preselected one,
    or those the filter (countries or provider ids) allows, whatever their release channel
    (the payout's own provider list is the whole choice)."""
    candidates = [p for p in among if p.serves(currency)]
    if selection["type"] == "preselected":
        return [p for p in candidates if p.id == selection["provider_id"]]
    chosen = selection.get("filter") or {}
    ids = chosen.get("provider_ids")
    found = search(candidates, countries=chosen.get("countries"), release_channel="alpha")
    return [p for p in found if ids is None or p.id in ids]


def check_selection(selection: dict[str, Any], currency: str, catalogue: Sequence[Provider]) -> str:
    """The scheme a verified payout in `currency` runs on; raises a problem naming the field
    when the selection leaves the payee no provider (or names a scheme the provider lacks)."""
    providers = selectable_providers(selection, currency, catalogue)
    if selection["type"] == "preselected":
        if not providers:
            raise invalid_field(
                f"{SELECTION_FIELD}.provider_id",
                f"must be a verified-payout provider that pays {currency}"
                f" ({', '.join(p.id for p in catalogue)})",
            )
        scheme = (selection.get("scheme_selection") or {}).get("scheme_id")
        if scheme is not None and scheme not in providers[0].schemes:
            raise invalid_field(
                f"{SELECTION_FIELD}.scheme_selection.scheme_id",
                f"{providers[0].id} pays over {', '.join(providers[0].schemes)}",
            )
        return scheme or providers[0].schemes[0]
    if not providers:
        raise invalid_field(
            f"{SELECTION_FIELD}.filter",
            f"leaves no verified-payout provider that pays {currency}",
        )
    return providers[0].schemes[0]


def name_matches(holder: str, user_name: str) -> bool:
    """True when the account holder's name is the payout user's name (skeletons equal)."""
    return name_skeleton(holder) == name_skeleton(user_name)


def pay_in_matches(criteria: dict[str, Any], pay_in: PayIn) -> bool:
    """True when the pay-in is the one the transaction search criteria describe."""
    statement = pay_in.statement.casefold()
    return (
        pay_in.amount_in_minor == criteria["amount_in_minor"]
        and pay_in.currency == criteria["currency"]
        and pay_in.created_on.isoformat() == criteria["created_at"]
        and any(token.casefold() in statement for token in criteria["tokens"])
    )


def verification_failure(
    verification: dict[str, Any],
    user_name: str,
    account: KnownAccount,
    pay_ins: Iterable[PayIn],
) -> FailureReason | None:
    """Why the chosen account does not prove the payee (name first, then the transaction
    search), or None when it does."""
    if verification.get("verify_name") and not name_matches(account.account_holder_name, user_name):
        return NAME_MISMATCH
    criteria = verification.get("transaction_search_criteria")
    if criteria and not any(pay_in_matches(criteria, p) for p in pay_ins):
        return NO_MATCHING_PAY_IN
    return None


def choose_provider(stage: str, chosen: str | None, provider_id: str) -> VerifiedStage:
    """The stage after the payee chooses `provider_id`: `authorizing` (choosing the same one
    again changes nothing); raises InvalidTransition once past that, or for another provider
    than the one chosen before."""
    if stage == VerifiedStage.AUTHORIZATION_REQUIRED:
        return VerifiedStage.AUTHORIZING
    if stage == VerifiedStage.AUTHORIZING and chosen == provider_id:
        return VerifiedStage.AUTHORIZING
    raise InvalidTransition(f"a {stage} payout cannot choose {provider_id}")


@dataclass(frozen=True)
class Outcome:
    """Where the payee's decision at the provider takes the payout: `pending` (onto the
    rails, paying the account chosen) or `failed` with `failure_reason`."""

    stage: Stage
    failure_reason: FailureReason | None = None


def authorize(
    stage: str,
    *,
    verification: dict[str, Any],
    user_name: str,
    account: KnownAccount | None,
    pay_ins: Iterable[PayIn],
) -> Outcome:
    """The payee's decision at the provider: authorise with `account`, or decline (None),
    checked against the payout's verification; raises InvalidTransition unless the payout
    is `authorizing`."""
    if stage != VerifiedStage.AUTHORIZING:
        raise InvalidTransition(f"a {stage} payout is not being authorised")
    if account is None:
        return Outcome(Stage.FAILED, DECLINED)
    reason = verification_failure(verification, user_name, account, pay_ins)
    if reason is not None:
        return Outcome(Stage.FAILED, reason)
    return Outcome(Stage.PENDING)


def expires_at(created_at: datetime) -> datetime:
    """When a verified payout created at `created_at` fails unless its payee has acted."""
    return created_at + AUTHORIZATION_WINDOW


def expiry(
    stage: str,
    created_at: datetime,
    now: datetime,
    pending_failure: FailureReason | None = None,
) -> Outcome | None:
    """The outcome of the authorisation window's end at `now`: `failed` for a payout still
    before the rails (`authorization_required` or `authorizing`) once the window has closed,
    with `expired`, or with the failure it was accepted with (`pending_failure`: insufficient
    funds, a blocked beneficiary), the reason it could never have been paid; None when the
    window is open or the payee has acted (nothing to do)."""
    if stage in BEFORE_RAILS and now >= expires_at(created_at):
        return Outcome(Stage.FAILED, pending_failure or NOT_ACTED_ON)
    return None
