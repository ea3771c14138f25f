"""core/iban.py: an IBAN that is not valid is refused naming the field and the reason, never
repeating the value (the answer is kept in the request log; an IBAN is personal data)."""

from __future__ import annotations

import pytest

from bankrail.core.iban import normalise_iban
from bankrail.core.problems import InvalidParameters


def test_a_valid_iban_is_compacted() -> None:
    assert normalise_iban("gb33 bukb 2020 1555 5555 55", "iban") == "GB33BUKB20201555555555"


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        ("GB33BUKB2020155555555!", "Invalid characters in IBAN"),
        ("gb33-bukb-2020-1555-5555-55", "Invalid characters in IBAN"),
        ("GB00BUKB20201555555555", "Invalid checksum digits"),
    ],
)
def test_the_refusal_names_the_reason_not_the_account(sent: str, reason: str) -> None:
    with pytest.raises(InvalidParameters) as refused:
        normalise_iban(sent, "beneficiary.iban")
    assert refused.value.detail == f"beneficiary.iban: not a valid IBAN ({reason})"
    compact = sent.replace("-", "").replace(" ", "").upper()
    assert compact[4:12] not in str(refused.value.detail)
    assert compact[4:12] not in str(refused.value.errors)
