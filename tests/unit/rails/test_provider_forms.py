"""The mock providers' forms check the payer's answers as the inputs they describe say."""

from __future__ import annotations

from bankrail.rails.provider_forms import form_errors, forms_of


def test_the_rust_sdks_polish_answers_fill_the_polish_form() -> None:
    (form,) = forms_of("mock-payments-pl-redirect")
    answers = {"remitter-name": "Rem Itter", "remitter-nrb": "12345678901234567890123456"}
    assert form_errors(form, answers) == {}
    wrong = form_errors(form, {"remitter-name": "Rem Itter", "remitter-nrb": "123"})
    assert set(wrong) == {"inputs.remitter-nrb"}


def test_missing_unknown_and_unoffered_answers_are_named() -> None:
    first, second, _ = forms_of("mock-payments-de-embedded")
    errors = form_errors(first, {"remitter-name": "A", "psu-pin": "1"})
    assert set(errors) == {
        "inputs.remitter-iban",
        "inputs.psu-id",
        "inputs.psu-password",
        "inputs.psu-pin",
    }
    assert form_errors(second, {"embedded-auth-flow-sca-select": "Post"}) == {
        "inputs.embedded-auth-flow-sca-select": ["must be the id of one of the options"]
    }


def test_plain_redirect_providers_ask_no_form() -> None:
    assert forms_of("mock-payments-gb-redirect") == ()
