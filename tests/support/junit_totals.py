"""The closing line of `./dev test`: pytest's summary line over both tiers' JUnit XML reports.

    python tests/support/junit_totals.py SECONDS REPORT...

prints, for instance, `2 failed, 1690 passed, 11 skipped in 403s (0:06:43)`, counted as
pytest counts: a test whose teardown failed is passed and also one error; an expected
failure is xfailed. An unexpected pass is passed (the report does not tell it apart). A report
that does not exist (a tier that could not start) counts nothing.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from datetime import timedelta
from pathlib import Path

# pytest's order of outcomes in its summary line.
ORDER = ("failed", "passed", "skipped", "xfailed", "error")


def outcomes(report: Path) -> Counter[str]:
    """How many tests of one JUnit XML report (pytest's `--junitxml`) ended each way."""
    counts: Counter[str] = Counter()
    if not report.exists():
        return counts
    # A test that failed and then failed its teardown is two <testcase> elements of one name.
    tests: dict[tuple[str | None, str | None], list[ElementTree.Element]] = {}
    written_by_pytest = ElementTree.parse(report)  # noqa: S314 (not untrusted data)
    for case in written_by_pytest.getroot().iter("testcase"):
        tests.setdefault((case.get("classname"), case.get("name")), []).extend(case)
    for results in tests.values():
        errors = [result for result in results if result.tag == "error"]
        skipped = [result for result in results if result.tag == "skipped"]
        counts["error"] += len(errors)
        if any(result.tag == "failure" for result in results):
            counts["failed"] += 1
        elif skipped:
            counts["xfailed" if skipped[0].get("type") == "pytest.xfail" else "skipped"] += 1
        elif all("teardown" in error.get("message", "") for error in errors):
            counts["passed"] += 1
    return counts


def summary(counts: Counter[str], seconds: int) -> str:
    """pytest's summary line for these counts and this wall-clock time."""
    parts = [
        f"{counts[outcome]} {'errors' if outcome == 'error' and counts[outcome] > 1 else outcome}"
        for outcome in ORDER
        if counts[outcome]
    ]
    took = f"{seconds}s ({timedelta(seconds=seconds)})"
    return f"{', '.join(parts) or 'no tests ran'} in {took}"


def main(arguments: list[str]) -> None:
    seconds, *reports = arguments
    print(summary(sum((outcomes(Path(report)) for report in reports), Counter()), int(seconds)))


if __name__ == "__main__":
    main(sys.argv[1:])
