"""Which of the sandbox's powers a running service has.

A sandbox lets whoever calls it choose outcomes that a real bank or scheme would decide: the
payer's answer at a mock provider, a payout's or refund's fate through its reference, money
arriving by an incoming transfer, the time. `Settings.powers` is the one place that decides
which of these are on; every route, page, job and service asks this object, never the mode.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_PROVIDER_AVAILABLE", "SANDBOX", "SandboxPowers"]

NO_PROVIDER_AVAILABLE = (
    "No payment provider is available: this deployment connects to no real bank and its mock "
    "providers are off (production mode without BANKRAIL_MOCK_PROVIDERS=on)."
)


@dataclass(frozen=True)
class SandboxPowers:
    """The sandbox powers of a service.

    - `sandbox_routes`: `/sandbox/...` (incoming transfers, the service clock, resets) and the
      console's sandbox panel.
    - `mock_providers`: the mock providers are offered (provider search, authorisation flows,
      the hosted pages) and their payer decisions are reachable: the mock bank's pages and
      headless actions, the embedded provider's form, the mandate consent with its remitter
      balance.
    - `outcome_tokens`: `fail:...` and `delay:N` in a payout's or refund's reference choose what
      the simulated scheme does with it; without this power a reference is only a reference.
    """

    sandbox_routes: bool
    mock_providers: bool
    outcome_tokens: bool

    @classmethod
    def for_deployment(cls, sandbox: bool, mock_providers: bool) -> SandboxPowers:
        """A sandbox has every power. A production deployment has none, unless its operator
        turned the mock providers on for staging: then the mock providers and the outcome
        tokens, the two ways a caller chooses what the simulated rails decide, are on; the
        sandbox routes (free money, clock control) stay off."""
        if sandbox:
            return SANDBOX
        return cls(
            sandbox_routes=False, mock_providers=mock_providers, outcome_tokens=mock_providers
        )


SANDBOX = SandboxPowers(sandbox_routes=True, mock_providers=True, outcome_tokens=True)
"""Every power: sandbox mode."""
