"""The ledger decides every hold (issue 38.5): the kind of a hold's transaction is named once,
by `ledger.movements.hold`, and the SQL writers of holds take it with each hold; no SQL
function file spells a hold kind."""

from __future__ import annotations

import uuid

from bankrail.db.migrations import available_functions
from bankrail.ledger.movements import Ledgers, Purpose, hold


def test_no_sql_function_file_names_a_hold_kind() -> None:
    account = Ledgers(uuid.uuid4(), "GBP", available_ledger_id=1, held_ledger_id=2)
    kinds = {hold(account, purpose, 1, uuid.uuid4()).kind for purpose in Purpose}
    assert kinds == {"payout_hold", "refund_hold"}
    spelled = [(name, kind) for name, sql in available_functions() for kind in kinds if kind in sql]
    assert spelled == []
