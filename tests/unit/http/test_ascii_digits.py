"""Numbers a client writes are ASCII digits, in the request schemas (whose patterns say
[0-9]: pydantic's \\d matches any script's digits) and in the console's form fields."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from bankrail.mandates.schemas import MandateUser
from bankrail.pages.console.forms import (
    FieldError,
    parse_amount,
    parse_clock_advance,
    parse_day_or_time,
)
from bankrail.payments.schemas import User
from bankrail.payouts.schemas import PayoutUser, UltimateCounterparty

ARABIC_INDIC_1990 = "\u0661\u0669\u0669\u0660"


@pytest.mark.parametrize(
    ("model", "body", "field", "written"),
    [
        (PayoutUser, {"name": "Ada"}, "date_of_birth", "{}-01-01"),
        (MandateUser, {"id": "u1"}, "date_of_birth", "{}-01-01"),
        (User, {"id": "u1"}, "date_of_birth", "{}-01-01"),
        (UltimateCounterparty, {"type": "business_client", "trading_name": "X"}, "mcc", "{}"),
    ],
)
def test_a_schemas_number_is_ascii_digits(
    model: type[BaseModel], body: dict[str, Any], field: str, written: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        model.model_validate({**body, field: written.format(ARABIC_INDIC_1990)})
    assert getattr(model.model_validate({**body, field: written.format("1990")}), field)


def test_the_consoles_amount_clock_and_day_fields_are_ascii_digits() -> None:
    with pytest.raises(FieldError):
        parse_amount("\u0661\u0662", "amount", "GBP")
    assert parse_amount("12", "amount", "GBP") == 1_200
    with pytest.raises(FieldError):
        parse_clock_advance("\u0661\u0662", "seconds")
    assert parse_clock_advance("12", "seconds") == 12.0
    with pytest.raises(FieldError):
        parse_day_or_time(f"{ARABIC_INDIC_1990}-01-01", "from", end_of_day=False)
    assert parse_day_or_time("1990-01-01", "from", end_of_day=False) is not None
