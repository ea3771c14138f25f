"""A merchant's reset and removal (merchants/closing.py, db/functions/merchant_reset.sql) know
every table that holds a merchant's rows: a new table with a `merchant_id` or
`merchant_account_id` column fails here until the purge (or the list of what a reset keeps)
names it."""

from __future__ import annotations

import asyncpg
import pytest

from bankrail.db.migrations import available_functions

pytestmark = pytest.mark.asyncio(loop_scope="session")

# Kept by a reset (the merchant's identity and set-up), removed by bankrail_delete_merchant.
KEPT_BY_RESET = {
    "merchants",
    "merchant_accounts",
    "api_clients",
    "signing_keys",
    "console_users",
    "sweeping_settings",  # an account setting; removed with the account (ON DELETE CASCADE)
    # A `bankrail listen` attached stays attached across a reset; its deliveries go with the
    # merchant's others (webhook_deliveries).
    "webhook_listeners",
}


async def test_every_table_with_a_merchants_rows_is_purged_or_kept_on_purpose(
    pool: asyncpg.Pool,
) -> None:
    rows = await pool.fetch(
        "SELECT DISTINCT table_name FROM information_schema.columns"
        " WHERE table_schema = 'public' AND column_name IN ('merchant_id', 'merchant_account_id')"
    )
    holding = {row["table_name"] for row in rows}
    purge = dict(available_functions())["merchant_reset"]

    unnamed = {
        table
        for table in holding - KEPT_BY_RESET
        if f"DELETE FROM {table} " not in purge and f"DELETE FROM {table}\n" not in purge
    }

    assert not unnamed, f"add {sorted(unnamed)} to bankrail_purge_merchant_objects"
