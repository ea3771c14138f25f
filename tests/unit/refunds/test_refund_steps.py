"""A refund's steps on the rails, as decided for the one writer of rail steps
(refunds.service.add_refund_steps into rails.advancement.RailBatch): which state it reaches,
what its account's activity shows, which event the merchant receives, where the held money
goes, and what is left to refund of its payment."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from bankrail.core.powers import SANDBOX, SandboxPowers
from bankrail.ledger.movements import Clearing
from bankrail.rails.advancement import RailBatch
from bankrail.refunds.acceptance import ADVANCE_JOB
from bankrail.refunds.service import add_refund_steps

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HELD, AVAILABLE = 41, 42
NO_TOKENS = SandboxPowers(sandbox_routes=False, mock_providers=False, outcome_tokens=False)


def refund_row(**changes: Any) -> dict[str, Any]:
    """A refunds row as the job reads it: a covered refund just accepted, with its account's
    ledger rows."""
    row: dict[str, Any] = {
        "id": uuid.uuid4(),
        "merchant_id": uuid.uuid4(),
        "payment_id": uuid.uuid4(),
        "merchant_account_id": uuid.uuid4(),
        "amount_in_minor": 250,
        "currency": "GBP",
        "reference": "order 1",
        "metadata": {"order": "1"},
        "scheme_id": "faster_payments_service",
        "stage": "pending",
        "pending_failure": None,
        "failure_reason": None,
        "created_at": NOW - timedelta(seconds=5),
        "authorized_at": None,
        "submitted_at": None,
        "executed_at": None,
        "failed_at": None,
        "held_ledger_id": HELD,
        "available_ledger_id": AVAILABLE,
    }
    row.update(changes)
    return row


def delivered(batch: RailBatch) -> list[dict[str, Any]]:
    """The events of the batch as the merchant's webhook receives them."""
    events: list[dict[str, Any]] = [json.loads(e.payload) for e in batch.events]
    return events


def test_a_covered_refund_on_an_instant_scheme_executes_in_one_run() -> None:
    row = refund_row()
    batch = RailBatch(NOW)
    plan = add_refund_steps(batch, row, NO_TOKENS)

    (step,) = batch.steps
    assert step["kind"] == "refund"
    assert step["id"] == str(row["id"])
    assert step["stage"] == "executed"
    assert step["status"] == "executed"
    assert step["authorized_at"] < step["submitted_at"] < step["executed_at"]
    assert step["from_stage"] == "pending"
    assert step["next_at"] is None
    assert step["next_job"] is None
    assert step["returned_payment"] is None
    (event,) = delivered(batch)
    assert event["type"] == "refund_executed"
    assert event["refund_id"] == str(row["id"])
    assert event["payment_id"] == str(row["payment_id"])
    assert event["metadata"] == {"order": "1"}
    assert event["executed_at"].endswith("Z")
    (move,) = batch.moves
    assert (move.kind, move.amount, move.source) == ("refund_execution", 250, HELD)
    assert move.destination == Clearing(
        "faster_payments_service", "GBP", row["merchant_account_id"]
    )
    assert plan.moves_money


def test_a_scheme_delay_leaves_the_refund_authorized_with_its_next_job() -> None:
    row = refund_row(reference="order 1 delay:60")
    batch = RailBatch(NOW)
    add_refund_steps(batch, row, SANDBOX)

    (step,) = batch.steps
    assert step["stage"] == "submitted"
    assert step["status"] == "authorized"  # v3 shows a submitted refund as authorized
    assert step["next_job"] == ADVANCE_JOB
    assert step["next_payload"] == {"refund_id": str(row["id"])}
    assert step["next_at"] == NOW + timedelta(seconds=60)
    assert batch.events == []
    assert batch.moves == []


def test_a_scheme_failure_gives_the_money_and_the_refundable_amount_back() -> None:
    submitted = NOW - timedelta(seconds=1)
    row = refund_row(
        reference="fail:scheme_error",
        stage="submitted",
        authorized_at=submitted,
        submitted_at=submitted,
    )
    batch = RailBatch(NOW)
    add_refund_steps(batch, row, SANDBOX)

    (step,) = batch.steps
    assert (step["stage"], step["failure_reason"]) == ("failed", "scheme_error")
    assert step["returned_payment"] == str(row["payment_id"])
    (event,) = delivered(batch)
    assert event["type"] == "refund_failed"
    assert event["failure_reason"] == "scheme_error"
    (move,) = batch.moves
    assert (move.kind, move.source, move.destination) == ("refund_release", HELD, AVAILABLE)
    assert move.available_of == row["merchant_account_id"]


def test_a_refund_not_covered_at_acceptance_fails_without_moving_money() -> None:
    row = refund_row(pending_failure="insufficient_funds")
    batch = RailBatch(NOW)
    plan = add_refund_steps(batch, row, SANDBOX)

    (step,) = batch.steps
    assert (step["stage"], step["failure_reason"]) == ("failed", "insufficient_funds")
    assert step["authorized_at"] is None
    assert step["returned_payment"] == str(row["payment_id"])
    (event,) = delivered(batch)
    assert (event["type"], event["failure_reason"]) == ("refund_failed", "insufficient_funds")
    assert batch.moves == []
    assert not plan.moves_money


def test_a_finished_refund_takes_no_step_and_writes_nothing() -> None:
    done = NOW - timedelta(seconds=1)
    row = refund_row(stage="executed", authorized_at=done, submitted_at=done, executed_at=done)
    batch = RailBatch(NOW)
    plan = add_refund_steps(batch, row, SANDBOX)

    assert plan.steps == ()
    assert batch.steps == []
    assert batch.events == []
    assert batch.moves == []
    assert not batch


def test_the_writer_receives_each_group_as_json_rows() -> None:
    row = refund_row()
    batch = RailBatch(NOW, job_ids=[7])
    add_refund_steps(batch, row, NO_TOKENS)

    now, job_ids, steps, events, moves = batch.arguments()
    assert (now, job_ids) == (NOW, [7])
    assert steps == batch.steps
    (event,) = events
    assert json.loads(event["payload"])["type"] == "refund_executed"
    assert event["family"] == "payments"
    assert event["ordering_key"] is None
    (move,) = moves
    assert move["kind"] == "refund_execution"
    assert (move["from"], move["to"]) == (HELD, None)
    assert move["to_code"] == f"clearing:faster_payments_service:GBP:{row['merchant_account_id']}"
