"""Every SQL function of Bankrail can be called by a person (issue 38.3): in a migrated
database, no `bankrail_*` function takes more than 12 parameters; a batch passes each of its
groups (rows, answers, holds, events) as one jsonb argument instead of one array per column."""

from __future__ import annotations

import asyncpg

MOST_PARAMETERS = 12


async def test_no_bankrail_function_takes_more_than_twelve_parameters(
    pool: asyncpg.Pool,
) -> None:
    rows = await pool.fetch(
        "SELECT p.proname, p.pronargs FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = current_schema() AND p.proname LIKE 'bankrail\\_%'"
    )
    names = {row["proname"] for row in rows}
    assert {"bankrail_write_payout_acceptances", "bankrail_write_holds"} <= names
    too_long = sorted(
        (row["proname"], row["pronargs"]) for row in rows if row["pronargs"] > MOST_PARAMETERS
    )
    assert too_long == []
