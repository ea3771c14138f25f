"""Merchants, clients, keys and merchant accounts in PostgreSQL."""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime

import asyncpg

from bankrail.core.ids import new_id
from bankrail.core.problems import Conflict, NotFound, invalid_field
from bankrail.db.pool import Connection
from bankrail.ledger.service import ensure_account
from bankrail.merchants.models import AccountIdentifiers, MerchantAccount, new_account_identifiers
from bankrail.security.keys import announce_revocation
from bankrail.security.signing import load_public_key
from bankrail.security.tokens import hash_secret, new_client_secret

__all__ = [
    "ACCOUNT_COLUMNS",
    "account_in_currency",
    "account_uuid",
    "create_client",
    "create_merchant",
    "create_merchant_account",
    "find_account_by_identifier",
    "get_account",
    "list_accounts",
    "list_clients",
    "lock_account",
    "register_signing_key",
    "revoke_client",
    "revoke_signing_key",
    "set_balance_threshold",
    "set_webhooks",
]

ACCOUNT_COLUMNS = (
    "ma.id, ma.merchant_id, ma.currency, ma.iban, ma.sort_code, ma.account_number,"
    " ma.account_holder_name, ma.available_ledger_id, ma.held_ledger_id,"
    " av.balance AS available_balance, h.balance AS held_balance, ma.balance_threshold,"
    " ma.notification_state, ma.status, ma.created_at"
)
_ACCOUNT_FROM = (
    " FROM merchant_accounts ma JOIN ledger_accounts av ON av.id = ma.available_ledger_id"
    " JOIN ledger_accounts h ON h.id = ma.held_ledger_id"
)


def account_from_row(row: asyncpg.Record) -> MerchantAccount:
    """Build a MerchantAccount from a row selected with ACCOUNT_COLUMNS."""
    return MerchantAccount(
        id=row["id"],
        merchant_id=row["merchant_id"],
        currency=row["currency"],
        identifiers=AccountIdentifiers(row["iban"], row["sort_code"], row["account_number"]),
        account_holder_name=row["account_holder_name"],
        available_ledger_id=row["available_ledger_id"],
        held_ledger_id=row["held_ledger_id"],
        available_balance=row["available_balance"],
        held_balance=row["held_balance"],
        balance_threshold=row["balance_threshold"],
        notification_state=row["notification_state"],
        status=row["status"],
        created_at=row["created_at"],
    )


async def create_merchant(conn: Connection, name: str, now: datetime) -> uuid.UUID:
    """A new merchant with no accounts, clients or keys."""
    merchant_id = new_id()
    await conn.execute(
        "INSERT INTO merchants (id, name, created_at) VALUES ($1, $2, $3)", merchant_id, name, now
    )
    return merchant_id


async def merchant_exists(conn: Connection, merchant_id: uuid.UUID) -> bool:
    """True if the merchant exists."""
    return bool(await conn.fetchval("SELECT true FROM merchants WHERE id = $1", merchant_id))


async def merchant_name(conn: Connection, merchant_id: uuid.UUID) -> str | None:
    """The merchant's display name, or None if there is no such merchant."""
    name = await conn.fetchval("SELECT name FROM merchants WHERE id = $1", merchant_id)
    return str(name) if name is not None else None


async def require_open_merchant(conn: Connection, merchant_id: uuid.UUID) -> None:
    """Nothing when the merchant exists and is not closed; else 404, or 409 when it was
    closed (a closed merchant gets no new clients, keys or console users). Call it in the
    transaction that adds the credential: the merchant's row stays share-locked until it
    ends, so that a close waits for the credential (and revokes it) rather than passing
    between this check and its INSERT."""
    closed = await conn.fetchrow(
        "SELECT closed_at FROM merchants WHERE id = $1 FOR SHARE", merchant_id
    )
    if closed is None:
        raise NotFound(f"Merchant {merchant_id} does not exist.")
    if closed["closed_at"] is not None:
        raise Conflict(f"Merchant {merchant_id} is closed.")


async def create_client(
    conn: Connection, merchant_id: uuid.UUID, scopes: list[str], now: datetime
) -> tuple[str, str]:
    """New client credentials for the merchant; the secret is returned once, stored hashed."""
    client_id = f"sandbox-{secrets.token_hex(8)}"
    secret = new_client_secret()
    async with conn.transaction():  # the check and the row together: a close waits for both
        await require_open_merchant(conn, merchant_id)
        await conn.execute(
            "INSERT INTO api_clients (client_id, merchant_id, secret_hash, scopes, created_at)"
            " VALUES ($1, $2, $3, $4, $5)",
            client_id,
            merchant_id,
            hash_secret(secret),
            sorted(set(scopes)),
            now,
        )
    return client_id, secret


async def register_signing_key(
    conn: Connection,
    merchant_id: uuid.UUID,
    public_key_pem: str,
    kid: str | None,
    now: datetime,
) -> str:
    """Register a P-521 public key under a kid (generated when not given); returns the kid.

    Registering the same key under the same kid again is harmless; another key under a kid
    already in use is a conflict.
    """
    async with conn.transaction():  # the check and the row together: a close waits for both
        await require_open_merchant(conn, merchant_id)
        try:
            load_public_key(public_key_pem)
        except ValueError as exc:
            raise invalid_field("public_key_pem", str(exc)) from exc
        kid = kid or str(uuid.uuid4())
        existing = await conn.fetchrow(
            "SELECT public_key_pem, revoked_at FROM signing_keys"
            " WHERE merchant_id = $1 AND kid = $2",
            merchant_id,
            kid,
        )
        if existing is not None:
            if existing["revoked_at"] is not None:
                raise Conflict(f"The kid {kid!r} belonged to a revoked key; it is not used again.")
            if existing["public_key_pem"].strip() != public_key_pem.strip():
                raise Conflict(f"The kid {kid!r} is already registered with a different key.")
            return kid
        await conn.execute(
            "INSERT INTO signing_keys (merchant_id, kid, public_key_pem, created_at)"
            " VALUES ($1, $2, $3, $4)",
            merchant_id,
            kid,
            public_key_pem.strip() + "\n",
            now,
        )
        return kid


async def revoke_signing_key(
    conn: Connection, merchant_id: uuid.UUID, kid: str, now: datetime
) -> None:
    """Revoke the merchant's active key `kid`: no signature made with it verifies any more,
    on any host once the transaction commits (NOTIFY; the caller forgets its own cache).
    404 when the merchant has no such active key."""
    revoked = await conn.fetchval(
        "UPDATE signing_keys SET revoked_at = $3"
        " WHERE merchant_id = $1 AND kid = $2 AND revoked_at IS NULL RETURNING true",
        merchant_id,
        kid,
        now,
    )
    if not revoked:
        raise NotFound(f"Merchant {merchant_id} has no signing key with kid {kid!r}.")
    await announce_revocation(conn)


async def revoke_client(
    conn: Connection, merchant_id: uuid.UUID, client_id: str, now: datetime
) -> None:
    """Revoke the merchant's active API client: its secret no longer gets tokens, and the
    tokens and console sessions it already has stop working (NOTIFY, as for keys). 404 when
    the merchant has no such active client."""
    revoked = await conn.fetchval(
        "UPDATE api_clients SET revoked_at = $3"
        " WHERE merchant_id = $1 AND client_id = $2 AND revoked_at IS NULL RETURNING true",
        merchant_id,
        client_id,
        now,
    )
    if not revoked:
        raise NotFound(f"Merchant {merchant_id} has no API client {client_id!r}.")
    await announce_revocation(conn)


async def list_clients(conn: Connection, merchant_id: uuid.UUID) -> list[dict[str, object]]:
    """The merchant's active API clients (id, scopes, created_at), oldest first."""
    rows = await conn.fetch(
        "SELECT client_id, scopes, created_at FROM api_clients"
        " WHERE merchant_id = $1 AND revoked_at IS NULL ORDER BY created_at, client_id",
        merchant_id,
    )
    return [dict(row) for row in rows]


async def set_webhooks(
    conn: Connection,
    merchant_id: uuid.UUID,
    payments_uri: str | None,
    payouts_uri: str | None,
    *,
    clear_payments: bool = False,
    clear_payouts: bool = False,
) -> dict[str, str | None]:
    """Set (or clear) the merchant's webhook URIs and return both as now configured."""
    row = await conn.fetchrow(
        "UPDATE merchants SET payments_webhook_uri ="
        " CASE WHEN $2 THEN NULL ELSE coalesce($3, payments_webhook_uri) END,"
        " payouts_webhook_uri ="
        " CASE WHEN $4 THEN NULL ELSE coalesce($5, payouts_webhook_uri) END"
        " WHERE id = $1 RETURNING payments_webhook_uri, payouts_webhook_uri",
        merchant_id,
        clear_payments,
        payments_uri,
        clear_payouts,
        payouts_uri,
    )
    if row is None:
        raise NotFound(f"Merchant {merchant_id} does not exist.")
    return {"payments_uri": row[0], "payouts_uri": row[1]}


async def create_merchant_account(
    conn: Connection,
    merchant_id: uuid.UUID,
    currency: str,
    account_holder_name: str | None,
    now: datetime,
) -> MerchantAccount:
    """Open a GBP or EUR account with fresh identifiers and its two ledger accounts; 404
    when the merchant does not exist, whether or not a holder name is given."""
    name = await merchant_name(conn, merchant_id)
    if name is None:
        raise NotFound(f"Merchant {merchant_id} does not exist.")
    holder = account_holder_name or name
    account_id = new_id()
    available = await ensure_account(
        conn, f"merchant:{account_id}:available", currency, allow_negative=False
    )
    held = await ensure_account(conn, f"merchant:{account_id}:held", currency, allow_negative=False)
    for _ in range(20):
        identifiers = new_account_identifiers(currency)
        inserted = await conn.fetchval(
            "INSERT INTO merchant_accounts (id, merchant_id, currency, iban, sort_code,"
            " account_number, account_holder_name, available_ledger_id, held_ledger_id,"
            " created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            " ON CONFLICT DO NOTHING RETURNING true",
            account_id,
            merchant_id,
            currency,
            identifiers.iban,
            identifiers.sort_code,
            identifiers.account_number,
            holder,
            available,
            held,
            now,
        )
        if inserted:
            account = await get_account(conn, account_id)
            assert account is not None
            return account
    raise RuntimeError("could not allocate unique account identifiers")


async def get_account(
    conn: Connection, account_id: uuid.UUID, merchant_id: uuid.UUID | None = None
) -> MerchantAccount | None:
    """The account, if it exists (and belongs to `merchant_id` when given)."""
    row = await conn.fetchrow(
        f"SELECT {ACCOUNT_COLUMNS}{_ACCOUNT_FROM}"
        " WHERE ma.id = $1 AND ($2::uuid IS NULL OR ma.merchant_id = $2)",
        account_id,
        merchant_id,
    )
    return account_from_row(row) if row else None


def account_uuid(account_id: uuid.UUID | str) -> uuid.UUID:
    """A merchant account id from a path: an id that is not a UUID names no account, 404."""
    if isinstance(account_id, uuid.UUID):
        return account_id
    try:
        return uuid.UUID(account_id)
    except ValueError:
        raise NotFound("Merchant account not found.") from None


async def require_account(
    conn: Connection, account_id: uuid.UUID | str, merchant_id: uuid.UUID | None = None
) -> MerchantAccount:
    """The account, or 404 (also for another merchant's account, and for an id that is not
    a UUID)."""
    account = await get_account(conn, account_uuid(account_id), merchant_id)
    if account is None:
        raise NotFound(f"Merchant account {account_id} not found.")
    return account


async def account_in_currency(
    conn: Connection, merchant_id: uuid.UUID, currency: str, field: str
) -> MerchantAccount:
    """The merchant's (first) account in `currency`, for APIs that name a currency rather
    than an account (v1 payouts, legacy deposits); 400 naming `field` when it has none."""
    account_id = await conn.fetchval(
        "SELECT id FROM merchant_accounts WHERE merchant_id = $1 AND currency = $2"
        " ORDER BY created_at LIMIT 1",
        merchant_id,
        currency,
    )
    if account_id is None:
        raise invalid_field(field, f"the merchant has no {currency} account")
    return await require_account(conn, account_id)


async def lock_account(conn: Connection, account_id: uuid.UUID) -> MerchantAccount:
    """Lock the account row for the rest of the transaction and return it fresh."""
    row = await conn.fetchrow(
        f"SELECT {ACCOUNT_COLUMNS}{_ACCOUNT_FROM} WHERE ma.id = $1 FOR UPDATE OF ma", account_id
    )
    if row is None:
        raise NotFound(f"Merchant account {account_id} not found.")
    return account_from_row(row)


async def list_accounts(conn: Connection, merchant_id: uuid.UUID | None) -> list[MerchantAccount]:
    """The merchant's accounts (every account when `merchant_id` is None), oldest first."""
    rows = await conn.fetch(
        f"SELECT {ACCOUNT_COLUMNS}{_ACCOUNT_FROM}"
        " WHERE $1::uuid IS NULL OR ma.merchant_id = $1 ORDER BY ma.created_at, ma.id",
        merchant_id,
    )
    return [account_from_row(r) for r in rows]


async def find_account_by_identifier(
    conn: Connection,
    *,
    iban: str | None = None,
    sort_code: str | None = None,
    account_number: str | None = None,
) -> MerchantAccount | None:
    """The account held at Bankrail with this IBAN or sort code and account number."""
    row = await conn.fetchrow(
        f"SELECT {ACCOUNT_COLUMNS}{_ACCOUNT_FROM}"
        " WHERE ($1::text IS NOT NULL AND ma.iban = $1)"
        " OR ($2::text IS NOT NULL AND ma.sort_code = $2 AND ma.account_number = $3)",
        iban,
        sort_code,
        account_number,
    )
    return account_from_row(row) if row else None


async def set_balance_threshold(
    conn: Connection, account_id: uuid.UUID, threshold: int | None
) -> MerchantAccount:
    """Set or clear the low-balance threshold; the notification state starts again at normal."""
    updated = await conn.fetchval(
        "UPDATE merchant_accounts SET balance_threshold = $2, notification_state = 'normal'"
        " WHERE id = $1 RETURNING id",
        account_id,
        threshold,
    )
    if updated is None:
        raise NotFound(f"Merchant account {account_id} not found.")
    return await require_account(conn, account_id)
