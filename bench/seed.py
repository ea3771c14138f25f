"""Bulk seeding, written with set-based SQL straight into the database: for the growth
scenario, N executed payouts and N settled payments with the rows the service keeps for each
(activity, stored idempotent answer, ledger transaction and postings, event and its
delivery); for the refund scenario, a few settled payments to refund."""

from __future__ import annotations

import time
import uuid

import asyncpg

_CHUNK = 100_000

_PAYOUTS_TEMPLATE = """
WITH t0 AS (
    SELECT n, $3::timestamptz - make_interval(secs => ($5 - n) / 50.0) AS at
    FROM generate_series($4::bigint, $4 + $6 - 1) AS n
), g AS (
    SELECT n, at, {id} AS id, {id} AS tx, {id} AS ev, {id} AS delivery,
           1 + n % 5000 AS amount,
           lpad((n % 100000000)::text, 8, '0') AS number
    FROM t0
), p AS (
    INSERT INTO payouts (id, api, merchant_id, merchant_account_id, amount_in_minor, currency,
        beneficiary, beneficiary_name, beneficiary_sort_code, beneficiary_account_number,
        reference, scheme_id, stage, created_at, authorized_at, submitted_at, executed_at)
    SELECT id, 'v3', $1, $2, amount, 'GBP',
        jsonb_build_object('type', 'external_account', 'reference', 'seed ' || n,
            'account_holder_name', 'Payee ' || n,
            'account_identifier', jsonb_build_object('type', 'sort_code_account_number',
                'sort_code', '040004', 'account_number', number),
            'account_identifiers', jsonb_build_array(jsonb_build_object(
                'type', 'sort_code_account_number', 'sort_code', '040004',
                'account_number', number))),
        'Payee ' || n, '040004', number, 'seed ' || n, 'faster_payments', 'executed',
        at, at, at, at
    FROM g RETURNING id
), a AS (
    INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor, currency,
        status, created_at, updated_at, details)
    SELECT id, $2, 'payout', amount, 'GBP', 'executed', at, at,
        jsonb_build_object('api', 'v3', 'transaction_id', id::text,
            'beneficiary_name', 'Payee ' || n, 'reference', 'seed ' || n,
            'scheme_id', 'faster_payments', 'authorized_at', at, 'submitted_at', at,
            'executed_at', at, 'v1_status', 'settled')
    FROM g
), k AS (
    INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body, created_at)
    SELECT $9, gen_random_uuid()::text, sha256(id::text::bytea), 202,
        convert_to('{"id":"' || id || '"}', 'UTF8'), at
    FROM g
), t AS (
    INSERT INTO ledger_transactions (id, kind, reference_id, created_at)
    SELECT tx, 'payout_execution', id, at FROM g
), l AS (
    INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)
    SELECT tx, $7::bigint, -amount, at FROM g UNION ALL SELECT tx, $8::bigint, amount, at FROM g
), e AS (
    INSERT INTO events (id, merchant_id, family, event_type, payload, created_at)
    SELECT ev, $1, 'payments', 'payout_executed',
        convert_to('{"type":"payout_executed","event_version":1,"event_id":"' || ev
            || '","payout_id":"' || id || '"}', 'UTF8'), at
    FROM g
), d AS (
    INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri, status,
        created_at, updated_at, window_start)
    SELECT delivery, ev, $1, 'payout_executed', NULL, 'skipped', at, at, at FROM g
)
SELECT sum(amount) FROM g
"""

_PAYMENTS_TEMPLATE = """
WITH t0 AS (
    SELECT n, $3::timestamptz - make_interval(secs => ($5 - n) / 50.0) AS at
    FROM generate_series($4::bigint, $4 + $6 - 1) AS n
), g AS (
    SELECT n, at, {id} AS id, 100 + n % 5000 AS amount FROM t0
), p AS (
    INSERT INTO payments (id, merchant_id, merchant_account_id, amount_in_minor, currency,
        user_id, user_details, selection_type, provider_id, scheme_id, status, created_at,
        authorized_at, executed_at, settled_at)
    SELECT id, $1, $2, amount, 'GBP', 'user-' || (n % 10000),
        jsonb_build_object('id', 'user-' || (n % 10000), 'name', 'Payer ' || n),
        'user_selected', 'mock-payments-gb-redirect', 'faster_payments', 'payment_settled', at,
        at, at, at
    FROM g
), a AS (
    INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor, currency,
        status, created_at, updated_at, details)
    SELECT id, $2, 'payment', amount, 'GBP', 'settled', at, at,
        jsonb_build_object('settled_at', at)
    FROM g
)
INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body, created_at)
SELECT $7, gen_random_uuid()::text, sha256(id::text::bytea), 201,
    convert_to('{"id":"' || id || '"}', 'UTF8'), at
FROM g
"""


# The service's ids are version-7 UUIDs (bankrail.core.ids.new_id): the creation time in
# milliseconds, then random bits. Seeded rows get the same kind of id for the time they are
# dated, so the grown indexes are laid out as a real history would leave them.
_ID_AT = (
    "overlay(overlay(replace(gen_random_uuid()::text, '-', '')"
    " placing lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') from 1 for 12)"
    " placing '7' from 13 for 1)::uuid"
)
_PAYOUTS = _PAYOUTS_TEMPLATE.replace("{id}", _ID_AT)
_PAYMENTS = _PAYMENTS_TEMPLATE.replace("{id}", _ID_AT)

# $1 merchant, $2 its GBP account, $3 the amount of each, $4 how many.
_SETTLED = """
WITH t0 AS (
    SELECT n, now() AS at FROM generate_series(1, $4::bigint) AS n
)
INSERT INTO payments (id, merchant_id, merchant_account_id, amount_in_minor, currency, user_id,
    user_details, selection_type, provider_id, scheme_id, status, created_at, authorized_at,
    executed_at, settled_at, history)
SELECT {id}, $1, $2, $3, 'GBP', 'bench-refunds-' || n,
    jsonb_build_object('id', 'bench-refunds-' || n, 'name', 'Payer ' || n), 'user_selected',
    'mock-payments-gb-redirect', 'faster_payments', 'payment_settled', at, at, at, at,
    jsonb_build_array(jsonb_build_object('status', 'payment_settled',
        'at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
FROM t0 RETURNING id
""".replace("{id}", _ID_AT)


async def seed_settled_payments(
    dsn: str, merchant_id: str, account_id: str, count: int, amount: int
) -> list[str]:
    """Insert `count` settled GBP payments of `amount` into the merchant's account, to be
    refunded (the refunds are paid from the account's funds, so the ledger is not touched
    here); returns their ids."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            _SETTLED, uuid.UUID(merchant_id), uuid.UUID(account_id), amount, count
        )
    finally:
        await conn.close()
    return [str(row["id"]) for row in rows]


async def seed_rows(
    dsn: str, merchant_id: str, account_id: str, count: int
) -> dict[str, float | int]:
    """Insert `count` payouts and `count` payments (and their companion rows) for the
    merchant's account, in chunks; returns how long it took."""
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        now = await conn.fetchval("SELECT now()")
        # Two ledger accounts of their own take the seeded postings, so the merchant's
        # balances and the ledger's invariants stay as they were.
        ledger_ids = []
        for side in ("from", "to"):
            ledger_ids.append(
                await conn.fetchval(
                    "INSERT INTO ledger_accounts (code, currency, allow_negative)"
                    " VALUES ($1, 'GBP', true) RETURNING id",
                    f"bench-seed:{side}:{uuid.uuid4()}",
                )
            )
        # The stored answers are under the merchant's own key space, with random keys as
        # its clients send them: new keys then land anywhere in that part of the index.
        scope = await conn.fetchval(
            "SELECT 'v3:' || client_id FROM api_clients WHERE merchant_id = $1"
            " ORDER BY client_id LIMIT 1",
            uuid.UUID(merchant_id),
        )
        total = 0
        for first in range(0, count, _CHUNK):
            size = min(_CHUNK, count - first)
            chunk = (uuid.UUID(merchant_id), uuid.UUID(account_id), now, first, count, size)
            async with conn.transaction():
                moved = await conn.fetchval(_PAYOUTS, *chunk, *ledger_ids, scope)
                total += int(moved or 0)
                await conn.execute(_PAYMENTS, *chunk, scope)
        await conn.execute(
            "UPDATE ledger_accounts SET balance = CASE id WHEN $1 THEN -$3::bigint"
            " ELSE $3::bigint END WHERE id IN ($1, $2)",
            ledger_ids[0],
            ledger_ids[1],
            total,
        )
        # Vacuumed and analysed now, so that autovacuum does not do it (and count as the
        # server's CPU) during the grown scenarios.
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()
    return {"rows_each": count, "seconds": round(time.perf_counter() - started, 1)}
