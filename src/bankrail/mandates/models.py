"""Mandates (variable recurring payments) in plain Python: the consent's state machine and the
arithmetic of its constraints (docs/api.md "Mandates").

    authorization_required -> authorizing -> authorized -> revoked (revocation_source)
      authorization_required | authorizing --fail(reason)--> failed (failure_stage = from)

Periodic limits run on the service clock. A period with `consent` alignment starts at the
mandate's anchor (its `valid_from`, else the moment it was authorised) and repeats every
length from there; with `calendar` alignment it follows the UTC calendar: the day from
midnight, the ISO week from Monday, the fortnight in 14-day blocks counted from Monday
1970-01-05, the month from its 1st, the half year from 1 January or 1 July, the year from
1 January. Months added to a consent anchor keep its day of the month, or the month's last day
when the month is shorter (31 January + 1 month = 28 or 29 February; + 2 months = 31 March).
"""

from __future__ import annotations

from calendar import monthrange
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

AUTHORIZATION_WINDOW = timedelta(minutes=15)
DEFAULT_REMITTER_BALANCE = 10_000_000
CALENDAR_EPOCH = datetime(1970, 1, 5, tzinfo=UTC)  # a Monday: fortnights count from here


class MandateStatus(StrEnum):
    """The statuses of a mandate."""

    AUTHORIZATION_REQUIRED = "authorization_required"
    AUTHORIZING = "authorizing"
    AUTHORIZED = "authorized"
    FAILED = "failed"
    REVOKED = "revoked"


class FailureReason(StrEnum):
    """Why a mandate failed."""

    AUTHORIZATION_FAILED = "authorization_failed"
    EXPIRED = "expired"
    NOT_AUTHORIZED = "not_authorized"  # the payer cancelled at the bank (Cancel)


class RevocationSource(StrEnum):
    """Who revoked the mandate: the merchant (`client`) or the payer at their bank (`user`)."""

    CLIENT = "client"
    USER = "user"


# A mandate must be authorised within the window after its creation.
EXPIRABLE = frozenset({MandateStatus.AUTHORIZATION_REQUIRED, MandateStatus.AUTHORIZING})


class InvalidTransition(Exception):
    """The mandate cannot take this step from its current status."""


@dataclass(frozen=True)
class MandateState:
    """The lifecycle fields of a mandate."""

    status: MandateStatus
    created_at: datetime
    authorized_at: datetime | None = None
    failed_at: datetime | None = None
    failure_stage: MandateStatus | None = None
    failure_reason: FailureReason | None = None
    revoked_at: datetime | None = None
    revocation_source: RevocationSource | None = None

    def _require(self, *allowed: MandateStatus) -> None:
        if self.status not in allowed:
            raise InvalidTransition(f"the mandate is {self.status}")

    def start_authorization(self) -> MandateState:
        """The payer started the journey (authorization-flow call or hosted page)."""
        self._require(MandateStatus.AUTHORIZATION_REQUIRED)
        return replace(self, status=MandateStatus.AUTHORIZING)

    def authorize(self, now: datetime) -> MandateState:
        """The payer gave their consent at the bank."""
        self._require(MandateStatus.AUTHORIZING)
        return replace(self, status=MandateStatus.AUTHORIZED, authorized_at=now)

    def fail(self, now: datetime, reason: FailureReason) -> MandateState:
        """The consent was never given; `failure_stage` is the status it stopped at."""
        self._require(*EXPIRABLE)
        return replace(
            self,
            status=MandateStatus.FAILED,
            failed_at=now,
            failure_stage=self.status,
            failure_reason=reason,
        )

    def revoke(self, now: datetime, source: RevocationSource) -> MandateState:
        """The merchant or the payer withdrew an authorised mandate."""
        self._require(MandateStatus.AUTHORIZED)
        return replace(self, status=MandateStatus.REVOKED, revoked_at=now, revocation_source=source)

    def expires_at(self) -> datetime:
        """When an unauthorised mandate fails with `expired`."""
        return self.created_at + AUTHORIZATION_WINDOW

    def is_expired(self, now: datetime) -> bool:
        """True when the mandate is still unauthorised and its window has passed."""
        return self.status in EXPIRABLE and now >= self.expires_at()


# --- periods ------------------------------------------------------------------------------------


class Period(StrEnum):
    """The length of a periodic limit."""

    DAY = "day"
    WEEK = "week"
    FORTNIGHT = "fortnight"
    MONTH = "month"
    HALF_YEAR = "half_year"
    YEAR = "year"


class Alignment(StrEnum):
    """Where periods start: at the mandate's anchor, or on the calendar."""

    CONSENT = "consent"
    CALENDAR = "calendar"


_DAYS = {Period.DAY: 1, Period.WEEK: 7, Period.FORTNIGHT: 14}
_MONTHS = {Period.MONTH: 1, Period.HALF_YEAR: 6, Period.YEAR: 12}


def add_months(moment: datetime, months: int) -> datetime:
    """`moment` moved by whole months, keeping its day of the month or, in a shorter month, the
    month's last day."""
    index = moment.year * 12 + moment.month - 1 + months
    year, month = divmod(index, 12)
    day = min(moment.day, monthrange(year, month + 1)[1])
    return moment.replace(year=year, month=month + 1, day=day)


def _months_between(start: datetime, end: datetime) -> int:
    """Whole months from `start` to `end` as calendar months count them (a first guess)."""
    return (end.year - start.year) * 12 + end.month - start.month


def period_bounds(
    period: Period, alignment: Alignment, anchor: datetime, now: datetime
) -> tuple[datetime, datetime]:
    """The period that contains `now`: [start, end). `anchor` is the consent anchor (used
    with `consent` alignment only); a `now` before the anchor lies in the first period."""
    now = now.astimezone(UTC)
    if alignment is Alignment.CALENDAR:
        return _calendar_bounds(period, now)
    anchor = anchor.astimezone(UTC)
    if now < anchor:
        now = anchor
    if period in _DAYS:
        length = timedelta(days=_DAYS[period])
        count = (now - anchor) // length
        start = anchor + count * length
        return start, start + length
    step = _MONTHS[period]
    count = _months_between(anchor, now) // step
    # The first guess may be one period late (anchor day-of-month after now's) or early.
    while count > 0 and add_months(anchor, count * step) > now:
        count -= 1
    while add_months(anchor, (count + 1) * step) <= now:
        count += 1
    return add_months(anchor, count * step), add_months(anchor, (count + 1) * step)


def _calendar_bounds(period: Period, now: datetime) -> tuple[datetime, datetime]:
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is Period.DAY:
        return midnight, midnight + timedelta(days=1)
    if period is Period.WEEK:
        start = midnight - timedelta(days=midnight.weekday())
        return start, start + timedelta(days=7)
    if period is Period.FORTNIGHT:
        blocks = (midnight - CALENDAR_EPOCH).days // 14
        start = CALENDAR_EPOCH + timedelta(days=14 * blocks)
        return start, start + timedelta(days=14)
    first = midnight.replace(day=1)
    if period is Period.MONTH:
        return first, add_months(first, 1)
    if period is Period.HALF_YEAR:
        start = first.replace(month=1 if now.month <= 6 else 7)
        return start, add_months(start, 6)
    start = first.replace(month=1)
    return start, add_months(start, 12)


# --- constraints ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeriodicLimit:
    """At most `maximum_amount` in each period, aligned as `alignment` says."""

    maximum_amount: int
    alignment: Alignment


@dataclass(frozen=True)
class Constraints:
    """What a mandate allows each payment and each period."""

    maximum_individual_amount: int
    periodic_limits: Mapping[Period, PeriodicLimit]
    valid_from: datetime | None = None
    valid_to: datetime | None = None

    def is_valid_at(self, now: datetime) -> bool:
        """True when `now` lies within [valid_from, valid_to]."""
        if self.valid_from is not None and now < self.valid_from:
            return False
        return self.valid_to is None or now <= self.valid_to

    def anchor(self, authorized_at: datetime | None, now: datetime) -> datetime:
        """Where consent-aligned periods start: `valid_from`, else the authorisation time (or
        `now` for a mandate not yet authorised)."""
        return self.valid_from or authorized_at or now

    def current_periods(
        self, authorized_at: datetime | None, now: datetime
    ) -> dict[Period, tuple[datetime, datetime]]:
        """Each limit's current period: [start, end)."""
        anchor = self.anchor(authorized_at, now)
        return {
            period: period_bounds(period, limit.alignment, anchor, now)
            for period, limit in self.periodic_limits.items()
        }

    def allows(self, amount: int, now: datetime, taken: Mapping[Period, int]) -> bool:
        """True when a payment of `amount` at `now` keeps within every constraint, `taken`
        being what the payments that count already took in each limit's current period."""
        if not self.is_valid_at(now) or amount > self.maximum_individual_amount:
            return False
        return all(
            taken.get(period, 0) + amount <= limit.maximum_amount
            for period, limit in self.periodic_limits.items()
        )


def remaining(limit: PeriodicLimit, taken: int) -> int:
    """What a period has left after `taken`."""
    return max(0, limit.maximum_amount - taken)


# --- retries of a payment on a mandate ------------------------------------------------------------

# How often the mock bank is asked again for a payment whose retry policy allows it: at a fixed
# pace for `standard`, at the next hour for `smart` (the sandbox's stand-in for "when the
# remitter's balance is most likely to allow it").
RETRY_EVERY = {"standard": timedelta(minutes=5), "smart": timedelta(hours=1)}
_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
MAXIMUM_RETRY_WINDOW = timedelta(days=90)


def retry_window(text: str) -> timedelta:
    """The length a retry policy's `for` names: a whole number of minutes (`30m`), hours
    (`12h`) or days (`90d`), from one minute to 90 days; ValueError otherwise."""
    number = text[:-1]
    if len(text) < 2 or text[-1] not in _UNITS or not (number.isascii() and number.isdigit()):
        raise ValueError("must be a whole number of minutes, hours or days, such as 30m or 90d")
    window = int(number) * _UNITS[text[-1]]
    if not timedelta(minutes=1) <= window <= MAXIMUM_RETRY_WINDOW:
        raise ValueError("must be from 1m to 90d")
    return window


@dataclass(frozen=True)
class RetryPolicy:
    """How a payment on a mandate that the payer's balance cannot cover is retried: for
    `window` from its creation, never leaving the payer with less than `minimum_balance`
    (`smart`'s `ensure_minimum_balance_in_minor`; 0 for `standard`)."""

    type: str
    window: timedelta
    minimum_balance: int = 0

    @classmethod
    def from_stored(cls, stored: Mapping[str, object] | None) -> RetryPolicy | None:
        """The policy of a payment's stored `retry` (None: the payment is not retried)."""
        if not stored or stored.get("type") not in RETRY_EVERY:
            return None
        minimum = stored.get("ensure_minimum_balance_in_minor")
        return cls(
            type=str(stored["type"]),
            window=retry_window(str(stored["for"])),
            minimum_balance=int(minimum) if isinstance(minimum, int) else 0,
        )

    def covers(self, balance: int, amount: int) -> bool:
        """True when the payer's `balance` pays `amount` and keeps the minimum."""
        return balance - amount >= self.minimum_balance

    def next_attempt(self, created_at: datetime, now: datetime) -> datetime | None:
        """When to ask the bank again after an attempt at `now` failed; None when the window
        (from `created_at`) is over and the payment fails. The last attempt is at its end."""
        until = created_at + self.window
        if now >= until:
            return None
        return min(now + RETRY_EVERY[self.type], until)


def balance_covers(balance: int, amount: int, policy: RetryPolicy | None) -> bool:
    """Whether the payer's balance pays `amount` now: keeping the policy's minimum, or
    without going below zero for a payment without one."""
    return policy.covers(balance, amount) if policy is not None else amount <= balance
