"""Sweeping: a merchant account's standing order to pay the balance above a maximum to its
approved IBAN at the end of every period (docs/api.md "Sweeping").

The settings live here, with the account: what the merchant sets
(`POST /v3/merchant-accounts/{id}/sweeping`), the destination the operator approved
(`PUT /admin/merchant-accounts/{id}/sweeping-destination`), and the period whose end is due.
Setting them schedules a `SWEEP_JOB` at the period's end; the job, in payouts/ (`sweeps.py`),
pays the excess out through the one payout path and moves the settings to the next period.

Periods run on the service clock from the moment the settings are set: a day, a week or two
weeks long, each starting where the one before ended.

In sandbox mode an account without an approved destination sweeps to a generated one: a
valid IBAN of its currency's route (a GB IBAN for GBP, an NL IBAN for EUR), derived from the
account's id, so it is the same on every read, as if the account had started with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from schwifty import IBAN

from bankrail.core.iban import normalise_iban
from bankrail.core.problems import InvalidParameters, NotFound, invalid_field
from bankrail.db.pool import Connection
from bankrail.jobs.queue import enqueue
from bankrail.merchants.models import MerchantAccount

SWEEP_JOB = "merchant_account.sweep"
"""The job that runs a period's sweep; its payload names the account and the period's end."""

PERIODS: dict[str, timedelta] = {
    "daily": timedelta(days=1),
    "weekly": timedelta(days=7),
    "fortnightly": timedelta(days=14),
}


def sandbox_destination(account: MerchantAccount) -> str:
    """The generated destination of a sandbox account: a valid IBAN reached by its
    currency's payouts (GB for GBP, NL for EUR), the same for the account every time."""
    digits = f"{account.id.int:040d}"
    if account.currency == "GBP":
        iban = IBAN.generate(
            "GB", bank_code="SWPB", branch_code=digits[-14:-8], account_code=digits[-8:]
        )
    else:
        iban = IBAN.generate("NL", bank_code="SWPB", account_code=digits[-10:])
    return str(iban)


def destination_of(account: MerchantAccount, approved: str | None, generated: bool) -> str | None:
    """The account's sweeping IBAN: the one the operator approved, else (when `generated`,
    in sandbox mode) its generated one; None when it has none."""
    if approved:
        return approved
    return sandbox_destination(account) if generated else None


def check_destination(account: MerchantAccount, raw: str, field: str = "iban") -> str:
    """An approvable destination for `account`, normalised: a valid IBAN that its
    currency's payouts reach (GBP: a GB IBAN; EUR: a non-GB IBAN), not its own."""
    iban = normalise_iban(raw, field)
    if account.currency == "GBP" and not iban.startswith("GB"):
        raise invalid_field(field, "a GBP account sweeps to a GB IBAN")
    if account.currency == "EUR" and iban.startswith("GB"):
        raise invalid_field(field, "a EUR account sweeps to a non-GB IBAN")
    if iban == account.identifiers.iban:
        raise invalid_field(field, "an account cannot sweep to itself")
    return iban


async def approved_destination(conn: Connection, account: MerchantAccount) -> str | None:
    """The IBAN the operator approved for the account (None: none)."""
    value: str | None = await conn.fetchval(
        "SELECT sweeping_iban FROM merchant_accounts WHERE id = $1", account.id
    )
    return value


async def set_destination(conn: Connection, account: MerchantAccount, iban: str | None) -> None:
    """Approve `iban` (already checked) as the account's destination; None withdraws it."""
    await conn.execute(
        "UPDATE merchant_accounts SET sweeping_iban = $2 WHERE id = $1", account.id, iban
    )


@dataclass(frozen=True)
class Sweeping:
    """An account's sweeping settings and the end of the current period."""

    max_amount_in_minor: int
    currency: str
    frequency: str
    period_end: datetime

    def to_api(self, destination: str) -> dict[str, Any]:
        """`GET /v3/merchant-accounts/{id}/sweeping`."""
        return {
            "max_amount_in_minor": self.max_amount_in_minor,
            "currency": self.currency,
            "frequency": self.frequency,
            "destination": {"type": "iban", "iban": destination},
        }

    def next_period_end(self, now: datetime) -> datetime:
        """The end of the first period after this one that ends after `now` (the periods
        the clock skipped at once are swept once)."""
        step = PERIODS[self.frequency]
        end = self.period_end + step
        if end <= now:
            end += step * ((now - end) // step + 1)
        return end


def _sweeping(row: Any) -> Sweeping:
    return Sweeping(
        row["max_amount_in_minor"], row["currency"].strip(), row["frequency"], row["period_end"]
    )


async def get_sweeping(conn: Connection, account: MerchantAccount) -> Sweeping | None:
    """The account's sweeping settings, if set."""
    row = await conn.fetchrow(
        "SELECT max_amount_in_minor, currency, frequency, period_end FROM sweeping_settings"
        " WHERE merchant_account_id = $1",
        account.id,
    )
    return _sweeping(row) if row else None


async def read_sweeping(
    conn: Connection, account: MerchantAccount, generated: bool
) -> dict[str, Any]:
    """The settings as `GET .../sweeping` answers them; 404 when none are set."""
    settings = await get_sweeping(conn, account)
    destination = destination_of(account, await approved_destination(conn, account), generated)
    if settings is None or destination is None:
        raise NotFound(f"Merchant account {account.id} has no sweeping settings.")
    return settings.to_api(destination)


async def set_sweeping(
    conn: Connection,
    account: MerchantAccount,
    *,
    max_amount: int,
    currency: str | None,
    frequency: str,
    now: datetime,
    generated: bool,
) -> Sweeping:
    """Set (or replace) the account's sweeping; its first period starts `now`, and its sweep
    is scheduled at the period's end. 400 for another currency than the account's, or an
    account without a destination (production: none approved)."""
    if currency is not None and currency != account.currency:
        raise invalid_field("currency", f"must be {account.currency}, the account's currency")
    if destination_of(account, await approved_destination(conn, account), generated) is None:
        raise InvalidParameters(
            "The merchant account has no approved sweeping destination.",
            {"destination": ["the operator has not approved a sweeping IBAN for this account"]},
        )
    settings = Sweeping(max_amount, account.currency, frequency, now + PERIODS[frequency])
    await conn.execute(
        "INSERT INTO sweeping_settings (merchant_account_id, max_amount_in_minor, currency,"
        " frequency, period_end, created_at) VALUES ($1, $2, $3, $4, $5, $6)"
        " ON CONFLICT (merchant_account_id) DO UPDATE SET"
        " max_amount_in_minor = EXCLUDED.max_amount_in_minor, currency = EXCLUDED.currency,"
        " frequency = EXCLUDED.frequency, period_end = EXCLUDED.period_end",
        account.id,
        settings.max_amount_in_minor,
        settings.currency,
        settings.frequency,
        settings.period_end,
        now,
    )
    await _schedule(conn, account, settings.period_end)
    return settings


async def _schedule(conn: Connection, account: MerchantAccount, period_end: datetime) -> None:
    await enqueue(
        conn,
        SWEEP_JOB,
        {"merchant_account_id": str(account.id), "period_end": period_end.isoformat()},
        period_end,
    )


async def delete_sweeping(conn: Connection, account: MerchantAccount) -> None:
    """Stop sweeping the account (nothing to do when it was not set); a sweep already
    scheduled finds no settings and does nothing."""
    await conn.execute("DELETE FROM sweeping_settings WHERE merchant_account_id = $1", account.id)


async def due_sweep(
    conn: Connection, account: MerchantAccount, period_end: datetime
) -> Sweeping | None:
    """The settings whose period ends at `period_end`, locked until the commit; None when
    they were changed or deleted since that sweep was scheduled (its job is stale)."""
    row = await conn.fetchrow(
        "SELECT max_amount_in_minor, currency, frequency, period_end FROM sweeping_settings"
        " WHERE merchant_account_id = $1 AND period_end = $2 FOR UPDATE",
        account.id,
        period_end,
    )
    return _sweeping(row) if row else None


async def start_next_period(
    conn: Connection, account: MerchantAccount, settings: Sweeping, now: datetime
) -> datetime:
    """Move the settings to their next period and schedule its sweep; returns its end."""
    period_end = settings.next_period_end(now)
    await conn.execute(
        "UPDATE sweeping_settings SET period_end = $2 WHERE merchant_account_id = $1",
        account.id,
        period_end,
    )
    await _schedule(conn, account, period_end)
    return period_end


async def sweeping_view(
    conn: Connection, account: MerchantAccount, generated: bool
) -> dict[str, Any]:
    """What the console shows of the account's sweeping: the destination (and whether the
    operator approved it or it is the sandbox's generated one) and the settings, if set."""
    approved = await approved_destination(conn, account)
    return {
        "destination": destination_of(account, approved, generated),
        "approved": approved is not None,
        "settings": await get_sweeping(conn, account),
    }
