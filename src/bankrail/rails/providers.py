"""The built-in catalogue of mock providers (docs/api.md): the banks a payer pays through, for a
payment or a mandate; which of them a deployment offers, and the rules for choosing one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from bankrail.core.powers import NO_PROVIDER_AVAILABLE, SandboxPowers
from bankrail.core.problems import Conflict
from bankrail.rails.provider_forms import forms_of

Flow = Literal["redirect", "embedded"]


@dataclass(frozen=True)
class Provider:
    """A payment provider (a bank) a payer can authorise at."""

    id: str
    display_name: str
    country_code: str
    currencies: tuple[str, ...]
    customer_segments: tuple[str, ...]
    release_channel: str
    flow: Flow
    schemes: tuple[str, ...]
    bg_color: str
    mandates: tuple[str, ...] = ()  # the mandate types it takes: vrp_sweeping, vrp_commercial

    def serves(self, currency: str) -> bool:
        """True if payments in `currency` can be made through this provider."""
        return currency in self.currencies

    @property
    def asks_forms(self) -> bool:
        """True if the payer fills in forms of this provider (the embedded provider, and the
        redirect providers that ask for additional inputs before the redirect)."""
        return bool(forms_of(self.id))

    def has_capabilities(self, wanted: dict[str, Any]) -> bool:
        """True if the provider has every capability `wanted` names (`{payments:
        {bank_transfer: {}}}`, `{mandates: {vrp_sweeping: {}}}`)."""
        own = {"payments": {"bank_transfer"}, "mandates": set(self.mandates)}
        for group, kinds in wanted.items():
            names = set(kinds or {})
            if group not in own or not own[group] or not names <= own[group]:
                return False
        return True

    def to_api(self, public_url: str) -> dict[str, Any]:
        """The provider resource of the v3 search and lookup."""
        capabilities: dict[str, Any] = {
            "payments": {
                "bank_transfer": {
                    "release_channel": self.release_channel,
                    "schemes": [{"id": s} for s in self.schemes],
                }
            }
        }
        if self.mandates:
            capabilities["mandates"] = {
                kind: {"release_channel": self.release_channel} for kind in self.mandates
            }
        return {
            "id": self.id,
            "display_name": self.display_name,
            "icon_uri": f"{public_url}/static/providers/{self.id}-icon.svg",
            "logo_uri": f"{public_url}/static/providers/{self.id}-logo.svg",
            "bg_color": self.bg_color,
            "country_code": self.country_code,
            "capabilities": capabilities,
        }


CATALOGUE: tuple[Provider, ...] = (
    Provider(
        "mock-payments-gb-redirect",
        "Mock UK Payments - Redirect Flow",
        "GB",
        ("GBP",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("faster_payments_service",),
        "#1D4ED8",
        ("vrp_sweeping", "vrp_commercial"),
    ),
    Provider(
        "mock-payments-de-redirect",
        "Mock German Bank",
        "DE",
        ("EUR",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("sepa_credit_transfer_instant", "sepa_credit_transfer"),
        "#047857",
    ),
    Provider(
        "mock-payments-fr-redirect",
        "Mock French Bank",
        "FR",
        ("EUR",),
        ("retail",),
        "general_availability",
        "redirect",
        ("sepa_credit_transfer_instant", "sepa_credit_transfer"),
        "#B91C1C",
    ),
    Provider(
        "mock-payments-de-embedded",
        "Mock German Bank (embedded)",
        "DE",
        ("EUR",),
        ("retail",),
        "general_availability",
        "embedded",
        ("sepa_credit_transfer",),
        "#6D28D9",
    ),
    Provider(
        "mock-payments-nl-redirect",
        "Mock Dutch Bank",
        "NL",
        ("EUR",),
        ("retail",),
        "private_beta",
        "redirect",
        ("sepa_credit_transfer_instant",),
        "#C2410C",
    ),
    Provider(
        "mock-payments-pl-redirect",
        "Mock Polish Bank",
        "PL",
        ("PLN",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("polish_domestic_standard",),
        "#DC2626",
    ),
    Provider(
        "mock-payments-no-redirect",
        "Mock Norwegian Bank",
        "NO",
        ("NOK",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("norwegian_domestic_credit_transfer",),
        "#1E3A8A",
    ),
    Provider(
        "mock-payments-de-redirect-additional-input-text",
        "Mock German Bank (additional inputs)",
        "DE",
        ("EUR",),
        ("retail",),
        "general_availability",
        "redirect",
        ("sepa_credit_transfer", "sepa_credit_transfer_instant"),
        "#0F766E",
    ),
    # The real sandbox's open-banking mock bank, for mandates; in private beta, so only a
    # search in that channel (or a lookup by id) lists it.
    Provider(
        "ob-uki-mock-bank-sbox",
        "Mock UK Bank (open banking)",
        "GB",
        ("GBP",),
        ("retail", "business"),
        "private_beta",
        "redirect",
        ("faster_payments_service",),
        "#4338CA",
        ("vrp_sweeping", "vrp_commercial"),
    ),
    # The provider of verified payouts (user_determined beneficiaries; VERIFIED_PAYOUT_PROVIDERS).
    Provider(
        "mock",
        "Mock Bank",
        "GB",
        ("GBP",),
        ("retail", "business"),
        "private_beta",
        "redirect",
        ("faster_payments_service",),
        "#374151",
    ),
)
_BY_ID = {p.id: p for p in CATALOGUE}
# The providers at which a payee chooses and proves the account a verified payout pays:
# the catalogue's `mock` (fidelity C1), the one definition of it.
VERIFIED_PAYOUT_PROVIDERS: tuple[Provider, ...] = (_BY_ID["mock"],)
RELEASE_CHANNELS = ("general_availability", "public_beta", "private_beta", "alpha")


def find_provider(provider_id: str) -> Provider | None:
    """The catalogue entry with this id, offered or not (a payment names its provider)."""
    return _BY_ID.get(provider_id)


def verified_payout_providers(powers: SandboxPowers) -> tuple[Provider, ...]:
    """The providers a payee can prove their account at in this deployment (mock providers
    only, so none unless the sandbox powers include them)."""
    return VERIFIED_PAYOUT_PROVIDERS if powers.mock_providers else ()


def offered(powers: SandboxPowers) -> tuple[Provider, ...]:
    """The providers a payer can authorise at in this deployment: every mock provider when
    its sandbox powers include them, else none (Bankrail connects to no real bank)."""
    return CATALOGUE if powers.mock_providers else ()


def require_offered(powers: SandboxPowers) -> None:
    """409 saying no provider is available unless this deployment offers providers: every
    step of a payer's journey (starting it, choosing a bank, the bank's decision) asks."""
    if not offered(powers):
        raise Conflict(NO_PROVIDER_AVAILABLE)


def _channel_allows(provider: Provider, channel: str) -> bool:
    # A wider channel includes the narrower ones: private_beta sees GA providers too.
    return RELEASE_CHANNELS.index(provider.release_channel) <= RELEASE_CHANNELS.index(channel)


def search(
    among: Iterable[Provider],
    *,
    currencies: Iterable[str] | None = None,
    countries: Iterable[str] | None = None,
    customer_segments: Iterable[str] | None = None,
    release_channel: str | None = None,
    flows: Iterable[Flow] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> list[Provider]:
    """The providers `among` matching every given filter (each list matches any of its
    values; `capabilities` names capabilities a provider must all have); without
    `release_channel`, general-availability providers only."""
    wanted_currencies = set(currencies) if currencies else None
    wanted_countries = set(countries) if countries else None
    wanted_segments = set(customer_segments) if customer_segments else None
    wanted_flows = set(flows) if flows else None
    channel = release_channel or "general_availability"
    return [
        p
        for p in among
        if (wanted_currencies is None or wanted_currencies & set(p.currencies))
        and (wanted_countries is None or p.country_code in wanted_countries)
        and (wanted_segments is None or wanted_segments & set(p.customer_segments))
        and (wanted_flows is None or p.flow in wanted_flows)
        and _channel_allows(p, channel)
        and (not capabilities or p.has_capabilities(capabilities))
    ]
