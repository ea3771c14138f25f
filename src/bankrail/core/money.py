"""Currencies and amounts. Money is always an integer number of minor units."""

from __future__ import annotations

# ISO 4217 codes accepted by the API, with their minor-unit exponents. Merchant accounts are
# held in GBP and EUR; the others are accepted where the spec takes any ISO 4217 code (for
# example provider search filters) so that a valid code is never rejected as unknown.
CURRENCY_EXPONENTS: dict[str, int] = {
    "GBP": 2,
    "EUR": 2,
    "USD": 2,
    "CHF": 2,
    "PLN": 2,
    "SEK": 2,
    "NOK": 2,
    "DKK": 2,
    "CZK": 2,
    "HUF": 2,
    "RON": 2,
    "BGN": 2,
    "JPY": 0,
}
ACCOUNT_CURRENCIES: frozenset[str] = frozenset({"GBP", "EUR"})
MAX_AMOUNT_IN_MINOR = 2**63 - 1


def is_known_currency(code: str) -> bool:
    """True for ISO 4217 codes this service recognises."""
    return code in CURRENCY_EXPONENTS


def decimal_text(amount_in_minor: int, currency: str, *, thousands: bool = True) -> str:
    """Minor units as a decimal in major units, e.g. `1,234.50` (or `1234.50`)."""
    exponent = CURRENCY_EXPONENTS.get(currency, 2)
    whole, fraction = divmod(abs(amount_in_minor), 10**exponent)
    text = f"{whole:,}" if thousands else str(whole)
    if exponent:
        text += f".{fraction:0{exponent}d}"
    return f"-{text}" if amount_in_minor < 0 else text


def format_amount(amount_in_minor: int, currency: str) -> str:
    """An amount for people, with its currency code, e.g. `1,234.50 GBP`."""
    return f"{decimal_text(amount_in_minor, currency)} {currency}"
