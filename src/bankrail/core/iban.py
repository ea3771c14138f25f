"""Input checks shared by several areas."""

from __future__ import annotations

from schwifty import IBAN
from schwifty.exceptions import SchwiftyException

from bankrail.core.problems import invalid_field


def normalise_iban(raw: str, field: str) -> str:
    """The IBAN in compact upper-case form; 400 naming `field` when it is not valid."""
    try:
        return str(IBAN(raw))
    except (SchwiftyException, ValueError) as exc:
        raise invalid_field(field, f"not a valid IBAN ({exc})") from exc
