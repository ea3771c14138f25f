"""The shop on the test's merchant (every fixture named bankrail_* is the plugin's)."""

from __future__ import annotations

import httpx
import pytest
from shop import Shop

from bankrail.testing import Merchant


@pytest.fixture
def shop(bankrail_client: httpx.Client, bankrail_merchant: Merchant) -> Shop:
    return Shop(bankrail_client, bankrail_merchant.account_id("GBP"))
