"""One run of a feature's hidden tests on a patch, with its outcomes read from a JUnit report.

The tree: a copy of the base, the patch, the hidden tests put back clean and `tests.patch`
(hidden_tests.py). The run: the test environment's interpreter isolated (`-I`, pytest_boot.py),
the base's pytest configuration copied outside the tree and given with `-c`, `--rootdir` and
`--confcutdir` fixed, no cache, and `--junitxml` pointing into a results directory beside the
tree, which the sandbox binds in writable and nothing else can see.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from scope_envs.cooperbench import hidden_tests
from scope_envs.cooperbench.junit import ReportError, TestReport, read_report
from scope_envs.cooperbench.patches import touched_files
from scope_envs.cooperbench.sandbox import Limits, Sandbox
from scope_envs.cooperbench.sources import BaseSource, TestEnvironment, copy_tree, git

BOOT = (Path(__file__).parent / "pytest_boot.py").read_text()
REPORT = "junit.xml"


@dataclass(frozen=True)
class TestRun:
    """What one run left: pytest's status and output, the report, or why there is none."""

    __test__ = False  # not a test class, whatever its name

    returncode: int | None
    output: str
    limit: str | None = None
    report: TestReport | None = None
    error: str | None = None


def run_hidden_tests(
    source: BaseSource,
    environment: TestEnvironment,
    patch: str,
    tests_patch: str,
    scratch: Path,
    *,
    limits: Limits,
    hidden: tuple[Path, ...] = (),
) -> TestRun:
    """Runs the tests `tests_patch` touches on base + `patch` in a sandbox, in `scratch` (which it fills)."""
    tree = scratch / "repo"
    copy_tree(source.tree, tree)
    failure = _apply(tree, scratch / "code.patch", patch, "code")
    if failure:
        return TestRun(None, "", error=failure)
    test_files = touched_files(tests_patch)
    roots = hidden_tests.hidden_test_roots(test_files)
    try:
        hidden_tests.restore_test_roots(tree, source.tree, roots)
    except hidden_tests.HiddenTestsError as error:
        return TestRun(None, "", error=str(error))
    failure = _apply(tree, scratch / "tests.patch", tests_patch, "tests")
    if failure:
        return TestRun(None, "", error=failure)
    hidden_tests.restore_conftests(tree, source.tree, roots)
    hidden_tests.remove_bytecode(tree)
    files = [name for name in test_files if (tree / name).is_file()]
    found = hidden_tests.pytest_config(source.tree, files)
    config = _write_config(source.tree, found, scratch / "config")
    rootdir = tree / found.parent if found is not None else tree
    results = scratch / "results"
    results.mkdir(mode=0o700)
    sandbox = Sandbox(
        tree,
        limits=limits,
        readable=(*environment.readable, config.parent),
        writable=(results,),
        hidden=hidden,
        path_prefix=(str(environment.venv / "bin"),),
    )
    sandbox.adopt()
    sandbox.adopt(results)
    options = [item for path in environment.recipe.python_path for item in ("--path", str(tree / path))]
    options += [item for plugin in environment.recipe.plugins for item in ("--plugin", plugin)]
    pytest_args = ["-c", str(config), "--rootdir", str(rootdir), "--confcutdir", str(rootdir)]
    pytest_args += ["-p", "no:cacheprovider", "-q", "--color=no", f"--junitxml={results / REPORT}"]
    pytest_args += ["-o", "junit_family=xunit2", *files]
    run = sandbox.run([str(environment.python), "-I", "-B", "-c", BOOT, *options, "--", *pytest_args])
    output = run.output.replace(str(tree), "<repo>").replace(str(scratch), "<scratch>")
    try:
        report = read_report(results / REPORT)
    except ReportError as error:
        return TestRun(run.returncode, output, run.limit, None, f"no test report: {error}")
    return TestRun(run.returncode, output, run.limit, report)


def _apply(tree: Path, path: Path, text: str, name: str) -> str | None:
    """Applies `text` to `tree`; the reason it does not apply, if it does not."""
    if not text.strip():
        return None
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    applied = git("apply", "--whitespace=nowarn", str(path), cwd=tree, check=False)
    if applied.returncode != 0:
        return f"the {name} patch does not apply: {applied.stderr.strip()[-500:]}"
    return None


def _write_config(base: Path, found: Path | None, directory: Path) -> Path:
    """A copy of the base's configuration file `found` (an empty `pytest.ini` if None) in `directory`."""
    directory.mkdir()
    os.chmod(directory, 0o755)
    target = directory / (found.name if found is not None else "pytest.ini")
    if found is not None:
        shutil.copyfile(base / found, target)
    else:
        target.write_text("[pytest]\n")
    os.chmod(target, 0o644)
    return target
