"""Grading as CooperBench does: merge the two patches, apply each feature's hidden tests, run them.

Merge: each patch is applied (`git apply`, then `git apply --3way`) on its own branch from the
base; the first feature's branch is merged into the second's (`git merge --no-ff`); on a conflict
the merge is retried with every path using git's `union` merge driver; if that conflicts too, the
merge failed and both suites fail. Tests: a fresh copy of the base gets the merged patch, the
feature's hidden tests are put back clean and its `tests.patch` applied, and the test files it
touches run under pytest in a sandbox, configured by nothing in the tree (grading.py). A suite
passes when pytest exits 0, its JUnit report shows no failure or error, and every *expected*
test passed: each test that passes with the feature's gold patch (found by one run of the gold
patch, cached).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scope_envs.cooperbench.dataset import Task
from scope_envs.cooperbench.grading import TestRun, run_hidden_tests
from scope_envs.cooperbench.patches import filter_test_files
from scope_envs.cooperbench.sandbox import Limits
from scope_envs.cooperbench.sources import BaseSource, TestEnvironment, git

OUTPUT_TAIL = 3000
NO_EXPECTED = "no expected tests: the gold patch passes none of the hidden tests here"
_DURATION = re.compile(r" in \d+(\.\d+)?s\b")


@dataclass(frozen=True)
class SuiteResult:
    feature: int
    passed: bool
    returncode: int | None
    tests_passed: int
    tests_failed: int
    output_tail: str
    error: str | None = None


@dataclass(frozen=True)
class MergeResult:
    status: str  # "clean" | "union" | "conflict" | "empty"
    patch: str
    apply_status: dict[str, str]
    detail: str = ""


@dataclass
class Evaluation:
    merge: MergeResult
    suites: dict[int, SuiteResult]
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def both_passed(self) -> bool:
        return all(suite.passed for suite in self.suites.values())

    def to_info(self) -> dict[str, Any]:
        return {
            "merge": {"status": self.merge.status, "apply_status": dict(self.merge.apply_status)},
            "suites": {str(number): asdict(suite) for number, suite in self.suites.items()},
            "both_passed": self.both_passed,
        }


class _ResultCache:
    """Results by (source, feature, merged patch): the same code and tests give the same result."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.items: OrderedDict[str, SuiteResult] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> SuiteResult | None:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        return None

    def put(self, key: str, value: SuiteResult) -> None:
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)


RESULTS = _ResultCache()


class Evaluator:
    """Merges and tests patches of one task on one base source."""

    def __init__(
        self,
        task: Task,
        source: BaseSource,
        environment: TestEnvironment,
        *,
        scratch: Path | None = None,
        limits: Limits | None = None,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        self.task = task
        self.source = source
        self.environment = environment
        self.scratch = scratch
        self.limits = limits or Limits(wall_seconds=300, cpu_seconds=300)
        self.hidden = hidden

    def _scratch_dir(self, prefix: str) -> Path:
        if self.scratch is not None:
            self.scratch.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.scratch))
        os.chmod(path, 0o711)
        return path

    # ---- merge ------------------------------------------------------------------------------------------

    def merge(self, first: str, second: str) -> MergeResult:
        """Merges the first feature's patch into the second's branch (plain, then union)."""
        first, second = filter_test_files(first), filter_test_files(second)
        if not first.strip() and not second.strip():
            return MergeResult("empty", "", {"first": "skipped", "second": "skipped"})
        scratch = self._scratch_dir("merge-")
        try:
            repo = scratch / "repo"
            git("clone", "--quiet", "--no-hardlinks", str(self.source.git_dir), str(repo))
            run = {"cwd": repo}
            apply_status = {}
            for branch, patch in (("first", first), ("second", second)):
                git("checkout", "--quiet", "-B", branch, "base", **run)
                apply_status[branch] = self._apply(repo, patch, scratch / f"{branch}.patch")
                git("add", "--all", ".", **run)
                git("commit", "--quiet", "--allow-empty", "-m", branch, **run)
            git("checkout", "--quiet", "second", **run)
            if git("merge", "--no-ff", "--no-edit", "first", check=False, **run).returncode == 0:
                status = "clean"
            else:
                git("merge", "--abort", check=False, **run)
                (repo / ".git" / "info").mkdir(exist_ok=True)
                (repo / ".git" / "info" / "attributes").write_text("* merge=union\n")
                if git("merge", "--no-ff", "--no-edit", "first", check=False, **run).returncode == 0:
                    status = "union"
                else:
                    git("merge", "--abort", check=False, **run)
                    return MergeResult("conflict", "", apply_status, "the union merge still conflicts")
            patch = git("diff", "--binary", "base", "HEAD", **run).stdout
            return MergeResult(status, patch, apply_status)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @staticmethod
    def _apply(repo: Path, patch: str, path: Path) -> str:
        if not patch.strip():
            return "skipped"
        path.write_text(patch, encoding="utf-8", errors="surrogateescape")
        for extra in ((), ("--3way",)):
            if git("apply", "--whitespace=nowarn", *extra, str(path), cwd=repo, check=False).returncode == 0:
                return "applied"
            git("reset", "--quiet", "--hard", "HEAD", cwd=repo, check=False)
        return "failed"

    # ---- tests ------------------------------------------------------------------------------------------

    def run_suite(self, patch: str, feature: int) -> SuiteResult:
        """Base + `patch` + the feature's hidden tests, run in a sandbox (cached by content)."""
        tests_patch = self.task.features[feature].tests_patch
        key = hashlib.sha256(
            "\0".join([self.source.key, self.task.name, str(feature), patch, tests_patch]).encode("utf-8", "replace")
        ).hexdigest()
        cached = RESULTS.get(key)
        if cached is not None:
            return cached
        result = self._run_suite(patch, feature, tests_patch)
        if result.returncode is not None and result.error != NO_EXPECTED:  # pytest ran, and so did the gold
            RESULTS.put(key, result)
        return result

    def _run_suite(self, patch: str, feature: int, tests_patch: str) -> SuiteResult:
        run = self._run_tests(patch, tests_patch)
        output = _DURATION.sub(" in <time>", run.output)[-OUTPUT_TAIL:]
        if run.report is None:
            limit = f"{run.limit} limit reached; " if run.limit else ""
            return SuiteResult(feature, False, run.returncode, 0, 0, output, f"{limit}{run.error}")
        report = run.report
        error = f"{run.limit} limit reached" if run.limit else None
        passed = run.returncode == 0 and run.limit is None and report.clean
        if passed:
            expected = self.expected_tests(feature)
            missing = sorted(expected - report.passed)
            if not expected:
                error = NO_EXPECTED
            elif missing:
                error = f"{len(missing)} of {len(expected)} expected tests did not pass, e.g. {missing[0]}"
            passed = bool(expected) and not missing
        return SuiteResult(feature, passed, run.returncode, len(report.passed), len(report.failed), output, error)

    def _run_tests(self, patch: str, tests_patch: str) -> TestRun:
        scratch = self._scratch_dir("tests-")
        try:
            return run_hidden_tests(
                self.source, self.environment, patch, tests_patch, scratch, limits=self.limits, hidden=self.hidden
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _feature_key(self, feature: int) -> tuple[str, str, int, bytes]:
        """What a feature's cached facts depend on: the source, the task, the feature's patches."""
        data = self.task.features[feature]
        digest = hashlib.sha256((data.patch + data.tests_patch).encode()).digest()
        return (self.source.key, self.task.name, feature, digest)

    def expected_tests(self, feature: int) -> frozenset[str]:
        """The ids of the hidden tests that pass with the feature's gold patch (one run, cached)."""
        data = self.task.features[feature]
        key = self._feature_key(feature)
        if key not in _EXPECTED:
            run = self._run_tests(filter_test_files(data.patch), data.tests_patch)
            if run.report is None or run.limit is not None:
                return frozenset()  # not cached: a limit or a broken environment may pass
            _EXPECTED[key] = run.report.passed
        return _EXPECTED[key]

    def evaluate(self, first_patch: str, first: int, second_patch: str, second: int) -> Evaluation:
        import time

        start = time.monotonic()
        merged = self.merge(first_patch, second_patch)
        suites = {}
        for feature in (first, second):
            if merged.status == "conflict":
                suites[feature] = SuiteResult(feature, False, None, 0, 0, "", "the patches could not be merged")
            else:
                suites[feature] = self.run_suite(merged.patch, feature)
        return Evaluation(merged, suites, time.monotonic() - start)

    def accepts(self, feature: int) -> bool:
        """Whether the base takes the feature's gold patch and its tests patch (a dry run, cached)."""
        data = self.task.features[feature]
        key = self._feature_key(feature)
        if key not in _ACCEPTS:
            scratch = self._scratch_dir("check-")
            try:
                ok = True
                for name, text in (("feature", filter_test_files(data.patch)), ("tests", data.tests_patch)):
                    path = scratch / f"{name}.patch"
                    path.write_text(text, encoding="utf-8", errors="surrogateescape")
                    checked = git(
                        "apply", "--check", "--whitespace=nowarn", str(path), cwd=self.source.tree, check=False
                    )
                    ok = ok and checked.returncode == 0
                _ACCEPTS[key] = ok
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return _ACCEPTS[key]


_ACCEPTS: dict[tuple[str, str, int, bytes], bool] = {}
_EXPECTED: dict[tuple[str, str, int, bytes], frozenset[str]] = {}
