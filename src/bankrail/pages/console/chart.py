"""The balance chart: a server-rendered SVG step line, with a text summary for assistive
technology and a table of the last points as a fallback. No JavaScript."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from bankrail.core.money import CURRENCY_EXPONENTS, format_amount
from bankrail.pages.console.data import BalanceHistory, BalancePoint

WIDTH = 640
HEIGHT = 240
LEFT = 10
RIGHT = 10
TOP = 40
BOTTOM = 40
TABLE_ROWS = 10


def format_time(moment: datetime | None) -> str:
    """A timestamp for people: `2026-01-02 03:04:05 UTC`."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Chart:
    """Everything the template needs to draw one account's chart."""

    points: str
    point_count: int
    area: str
    y_labels: list[tuple[float, str]]
    x_labels: list[tuple[float, str, str]]
    summary: str
    table: list[BalancePoint]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    bottom_y: int = HEIGHT - BOTTOM
    right_x: int = WIDTH - RIGHT


def _nice_ceiling(value: int) -> int:
    """A round number at or above `value` (1, 2, 2.5 or 5 times a power of ten)."""
    if value <= 0:
        return 0
    magnitude = int(10 ** (len(str(value)) - 1))
    for step in (1, 2, 2.5, 5, 10):
        candidate = int(step * magnitude)
        if candidate >= value:
            return candidate
    return 10 * magnitude


def build_chart(history: BalanceHistory, currency: str, now: datetime) -> Chart:
    """Lay the history out as a step line from the first known balance to now."""
    start = history.start_at
    end = max(now, history.points[-1].at if history.points else start)
    span = (end - start).total_seconds() or 1.0
    balances = [history.start_balance, *(p.balance for p in history.points)]
    low = min(0, *balances)
    high = _nice_ceiling(max(balances)) if max(balances) > 0 else 0
    if high == low:
        high = low + 10 ** CURRENCY_EXPONENTS.get(currency, 2) * 100
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM

    def x(moment: datetime) -> float:
        return round(LEFT + plot_w * (moment - start).total_seconds() / span, 1)

    def y(amount: int) -> float:
        return round(TOP + plot_h * (high - amount) / (high - low), 1)

    coords: list[tuple[float, float]] = [(x(start), y(history.start_balance))]
    previous = history.start_balance
    for point in history.points:
        coords.append((x(point.at), y(previous)))
        coords.append((x(point.at), y(point.balance)))
        previous = point.balance
    coords.append((x(end), y(previous)))
    points = " ".join(f"{cx},{cy}" for cx, cy in coords)
    baseline = y(max(low, 0)) if low < 0 else HEIGHT - BOTTOM
    area = f"{coords[0][0]},{baseline} {points} {coords[-1][0]},{baseline}"
    y_labels = [(y(high), format_amount(high, currency)), (y(low), format_amount(low, currency))]
    if low < 0 < high:
        y_labels.append((y(0), format_amount(0, currency)))
    stamp = "%Y-%m-%d %H:%M:%S" if span < 3600 else "%Y-%m-%d %H:%M"
    x_labels = [
        (float(LEFT), start.astimezone(UTC).strftime(stamp), "start"),
        (float(WIDTH - RIGHT), end.astimezone(UTC).strftime(stamp), "end"),
    ]
    summary = _summary(history, currency, start, end, low=min(balances), high=max(balances))
    return Chart(
        points=points,
        point_count=len(coords),
        area=area,
        y_labels=y_labels,
        x_labels=x_labels,
        summary=summary,
        table=list(reversed(history.points[-TABLE_ROWS:])),
    )


def _summary(
    history: BalanceHistory,
    currency: str,
    start: datetime,
    end: datetime,
    *,
    low: int,
    high: int,
) -> str:
    changes = len(history.points)
    if not changes:
        return (
            f"No movements between {format_time(start)} and {format_time(end)}; "
            f"the balance stayed at {format_amount(history.start_balance, currency)}."
        )
    first = "" if history.complete else " (the most recent ones)"
    last = history.points[-1].balance
    plural = "s" if changes != 1 else ""
    return (
        f"{changes} balance change{plural}{first} from {format_time(start)} to "
        f"{format_time(end)}: from {format_amount(history.start_balance, currency)} to "
        f"{format_amount(last, currency)}; lowest {format_amount(low, currency)}, highest "
        f"{format_amount(high, currency)}."
    )
