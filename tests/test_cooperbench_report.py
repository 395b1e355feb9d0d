"""The pieces of forgery-proof grading: the clean hidden-test tree and the JUnit report's reading."""

import os
from pathlib import Path

import pytest

from scope_envs.cooperbench.hidden_tests import (
    HiddenTestsError,
    hidden_test_roots,
    pytest_config,
    remove_bytecode,
    restore_conftests,
    restore_test_roots,
)
from scope_envs.cooperbench.junit import ReportError, read_report

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="{errors}" failures="0" skipped="1" tests="4">
<testcase classname="tests.test_a.TestA" name="test_ok" time="0.1" />
<testcase classname="tests.test_a.TestA" name="test_skip"><skipped message="no" /></testcase>
<testcase classname="tests.test_a" name="test_param[x-1]" />
{extra}
</testsuite></testsuites>"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_report_gives_each_test_id_its_outcome(tmp_path):
    extra = '<testcase classname="tests.test_a" name="test_late"><error message="teardown" /></testcase>'
    extra += '<testcase classname="tests.test_a" name="test_late" />'  # a second record of the same test
    report = read_report(write(tmp_path / "r.xml", REPORT.format(errors=1, extra=extra)))
    assert report.passed == {"tests.test_a.TestA::test_ok", "tests.test_a::test_param[x-1]"}
    assert report.failed == {"tests.test_a::test_late"} and report.skipped == {"tests.test_a.TestA::test_skip"}
    assert not report.clean


def test_a_report_whose_suite_declares_errors_is_not_clean(tmp_path):
    assert read_report(write(tmp_path / "ok.xml", REPORT.format(errors=0, extra=""))).clean
    assert not read_report(write(tmp_path / "bad.xml", REPORT.format(errors=2, extra=""))).clean


def test_unusable_reports_are_refused(tmp_path):
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><testsuites>&a;</testsuites>'
    cases = {
        "entities.xml": bomb,
        "html.xml": "<html><testsuite/></html>",
        "broken.xml": "<testsuites><testsuite>",
    }
    for name, text in cases.items():
        with pytest.raises(ReportError):
            read_report(write(tmp_path / name, text))
    os.symlink(write(tmp_path / "real.xml", REPORT.format(errors=0, extra="")), tmp_path / "link.xml")
    for name in ("link.xml", "missing.xml"):
        with pytest.raises(ReportError):
            read_report(tmp_path / name)


def test_hidden_test_roots_are_the_topmost_test_directories():
    files = ["tests/test_a.py", "tests/sub/test_b.py", "pkg/tests/x/test_c.py", "Tests/test_d.py", "test_top.py"]
    assert hidden_test_roots(files) == ["Tests", "pkg/tests", "test_top.py", "tests"]


def test_the_hidden_test_tree_is_put_back_from_the_base(tmp_path):
    base, tree = tmp_path / "base", tmp_path / "tree"
    write(base / "tests" / "conftest.py", "# base\n")
    write(base / "tests" / "test_a.py", "def test_a(): pass\n")
    write(base / "conftest.py", "# base root\n")
    write(tree / "elsewhere" / "test_a.py", "forged\n")
    os.symlink("elsewhere", tree / "tests")  # the patch turned tests/ into a link
    write(tree / "conftest.py", "# forged root\n")
    write(tree / "src" / "conftest.py", "# forged\n")
    write(tree / "src" / "__pycache__" / "m.cpython-311.pyc", "x")
    write(tree / "src" / "loose.pyc", "x")
    restore_test_roots(tree, base, ["tests"])
    restore_conftests(tree, base, ["tests"])
    remove_bytecode(tree)
    assert not (tree / "tests").is_symlink() and (tree / "tests" / "conftest.py").read_text() == "# base\n"
    assert (tree / "conftest.py").read_text() == "# base root\n" and not (tree / "src" / "conftest.py").exists()
    assert sorted(p.name for p in (tree / "src").iterdir()) == []


def test_a_linked_directory_above_the_hidden_tests_is_refused(tmp_path):
    base, tree = tmp_path / "base", tmp_path / "tree"
    write(base / "pkg" / "tests" / "test_a.py", "")
    write(tree / "other" / "tests" / "test_a.py", "")
    os.symlink("other", tree / "pkg")
    with pytest.raises(HiddenTestsError, match="pkg"):
        restore_test_roots(tree, base, ["pkg/tests"])


def test_the_base_pytest_configuration_is_found_as_pytest_finds_it(tmp_path):
    write(tmp_path / "setup.cfg", "[metadata]\nname = x\n\n[tool:pytest]\ntestpaths = tests\n")
    write(tmp_path / "tox.ini", "[tox]\nenvlist = py\n")  # no [pytest] section: does not count
    assert pytest_config(tmp_path, ["tests/test_a.py"]) == Path("setup.cfg")
    write(tmp_path / "pkg" / "pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-ra'\n")
    assert pytest_config(tmp_path, ["pkg/tests/test_b.py"]) == Path("pkg/pyproject.toml")
    write(tmp_path / "pytest.ini", "")
    assert pytest_config(tmp_path, ["tests/test_a.py"]) == Path("pytest.ini")
    assert pytest_config(tmp_path, []) is None


def test_a_base_conftest_is_never_written_through_a_link_leading_out(tmp_path):
    base, tree, outside = tmp_path / "base", tmp_path / "tree", tmp_path / "outside"
    write(base / "pkg" / "sub" / "conftest.py", "# base\n")
    (outside / "sub").mkdir(parents=True)
    tree.mkdir()
    os.symlink(outside, tree / "pkg")
    restore_conftests(tree, base, ["tests"])
    assert not (outside / "sub" / "conftest.py").exists()
