"""The closing line of `./dev test` (tests/support/junit_totals.py) counts the tiers' JUnit
reports as pytest's own summary line counts the tests."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from support.junit_totals import outcomes, summary

# What pytest 9 writes with --junitxml for a module whose tests end every way (shortened):
# its own summary line was "2 failed, 2 passed, 1 skipped, 1 xfailed, 1 xpassed, 3 errors".
REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">
<testsuite name="pytest" errors="3" failures="2" skipped="2" tests="9" time="0.438">
<testcase classname="test_sample" name="test_pass" time="0.001" />
<testcase classname="test_sample" name="test_fail" time="0.000">
  <failure message="assert False">...</failure></testcase>
<testcase classname="test_sample" name="test_skip" time="0.000">
  <skipped type="pytest.skip" message="no">...</skipped></testcase>
<testcase classname="test_sample" name="test_xfail" time="0.000">
  <skipped type="pytest.xfail" message="" /></testcase>
<testcase classname="test_sample" name="test_xpass" time="0.000" />
<testcase classname="test_sample" name="test_teardown_error" time="0.000">
  <error message="failed on teardown with &quot;RuntimeError: teardown&quot;">...</error>
  <system-out>captured</system-out></testcase>
<testcase classname="test_sample" name="test_fail_and_teardown_error" time="0.000">
  <failure message="assert False">...</failure></testcase>
<testcase classname="test_sample" name="test_fail_and_teardown_error" time="0.000">
  <error message="failed on teardown with &quot;RuntimeError: teardown&quot;">...</error>
</testcase>
<testcase classname="test_sample" name="test_setup_error" time="0.000">
  <error message="failed on setup with &quot;RuntimeError: setup&quot;">...</error></testcase>
</testsuite></testsuites>
"""


def test_each_test_is_counted_once_as_pytest_counts_it(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(REPORT)
    # The unexpected pass is a pass: JUnit XML does not tell it apart.
    assert outcomes(report) == Counter(failed=2, passed=3, skipped=1, xfailed=1, error=3)


def test_a_missing_report_counts_nothing(tmp_path: Path) -> None:
    assert outcomes(tmp_path / "not-written.xml") == Counter()


def test_the_line_adds_up_the_tiers_in_pytests_words_and_order() -> None:
    fast = Counter(passed=1500, skipped=2, error=1)
    slow = Counter(passed=190, failed=2, skipped=9)
    assert (
        summary(fast + slow, 403) == "2 failed, 1690 passed, 11 skipped, 1 error in 403s (0:06:43)"
    )
    assert summary(Counter(error=2), 5) == "2 errors in 5s (0:00:05)"
    assert summary(Counter(), 12) == "no tests ran in 12s (0:00:12)"
