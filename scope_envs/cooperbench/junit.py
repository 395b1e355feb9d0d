"""The outcome of each hidden test, read from the JUnit XML report pytest wrote outside the tree.

Never from the run's output, which the code under test can print anything into. A test's id is
`classname::name` as the report gives them; a test counts as passed only if every record of it
passed (pytest writes a second record for a test that fails and then errors in its teardown).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

MAX_REPORT_BYTES = 32 * 1024**2
FAILED_TAGS = ("failure", "error")


class ReportError(ValueError):
    """There is no usable report: missing, not a plain file, too big or not a pytest JUnit report."""


@dataclass(frozen=True)
class TestReport:
    """Test ids by outcome; `failed` holds failures and errors (collection errors among them)."""

    __test__ = False  # not a test class, whatever its name

    passed: frozenset[str]
    failed: frozenset[str]
    skipped: frozenset[str]
    suite_failures: int = 0  # the failures and errors the <testsuite> elements declare

    @property
    def clean(self) -> bool:
        """Nothing failed or errored, by the records or by the suites' own counts."""
        return not self.failed and self.suite_failures == 0


def read_report(path: Path) -> TestReport:
    data = _read_plain_file(path)
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ReportError("the report declares a document type or entities")
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as error:
        raise ReportError(f"the report is not well-formed XML: {error}") from None
    suites = [root] if root.tag == "testsuite" else list(root) if root.tag == "testsuites" else None
    if not suites or any(suite.tag != "testsuite" for suite in suites):
        raise ReportError(f"the report's root is <{root.tag}>, not pytest's <testsuites>/<testsuite>")
    outcomes: dict[str, set[str]] = {}
    declared = 0
    for suite in suites:
        declared += sum(_count(suite.get(name)) for name in ("failures", "errors"))
        for case in suite.iter("testcase"):
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
            tags = {child.tag for child in case}
            outcome = "failed" if tags & set(FAILED_TAGS) else "skipped" if "skipped" in tags else "passed"
            outcomes.setdefault(test_id, set()).add(outcome)
    return TestReport(
        passed=frozenset(test for test, seen in outcomes.items() if seen == {"passed"}),
        failed=frozenset(test for test, seen in outcomes.items() if "failed" in seen),
        skipped=frozenset(test for test, seen in outcomes.items() if "skipped" in seen and "failed" not in seen),
        suite_failures=declared,
    )


def _count(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 1  # an unreadable count is taken as a failure


def _read_plain_file(path: Path) -> bytes:
    """The file's bytes, refusing a symbolic link, a FIFO or anything over `MAX_REPORT_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        raise ReportError(f"no report at {path.name}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ReportError("the report is not a plain file")
        data = handle.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(f"the report is over {MAX_REPORT_BYTES} bytes")
    return data
