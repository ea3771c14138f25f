"""Input checks shared by several areas."""

from __future__ import annotations

from schwifty import IBAN
from schwifty.exceptions import SchwiftyException

from bankrail.core.problems import invalid_field


def normalise_iban(raw: str, field: str) -> str:
    """The IBAN in compact upper-case form; 400 naming `field` when it is not valid, saying
    why without repeating the value (an answer is kept in the request log, and an IBAN is
    personal data)."""
    try:
        return str(IBAN(raw))
    except (SchwiftyException, ValueError) as exc:
        raise invalid_field(field, f"not a valid IBAN ({_reason(exc)})") from exc


def _reason(exc: Exception) -> str:
    """The library's reason without the account number it quotes (`Invalid characters in
    IBAN GB33…`): every word holding four digits or more is left out."""
    words = [w for w in str(exc).split() if sum(c.isdigit() for c in w) < 4]
    return " ".join(words) or "invalid"
