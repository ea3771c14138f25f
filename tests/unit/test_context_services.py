"""The areas' services that app.py wires into the context: found by their class alone."""

from __future__ import annotations

import pytest

from bankrail.http.context import Services


class Acceptance:
    pass


class Creation:
    pass


def test_each_service_is_found_by_its_class() -> None:
    acceptance, creation = Acceptance(), Creation()
    services = Services(acceptance, creation)
    assert services.get(Acceptance) is acceptance
    assert services.get(Creation) is creation


def test_a_service_not_wired_is_a_lookup_error() -> None:
    with pytest.raises(LookupError, match="no Creation was wired"):
        Services(Acceptance()).get(Creation)
