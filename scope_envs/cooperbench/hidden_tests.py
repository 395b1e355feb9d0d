"""The tree the hidden tests run in, made so that nothing the agents wrote configures pytest.

After the merged patch is applied to a copy of the base: every *test root* of the feature's
`tests.patch` (the topmost test directory above each test file, e.g. `tests/`) is replaced by the
base's copy, whatever the patch did there, before `tests.patch` goes in; every `conftest.py`
outside the test roots is removed and the base's are put back; compiled bytecode is deleted (a
`.pyc` beside a restored file would otherwise be imported instead of it). pytest's configuration
is the base's (`pytest_config`), copied outside the tree and passed with `-c`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from scope_envs.cooperbench.sources import copy_tree

TEST_DIR_NAMES = frozenset({"test", "tests", "testing", "__tests__", "spec", "testdata"})
# pytest's order of configuration files in a directory, and what makes each one count.
CONFIG_FILES = (
    ("pytest.ini", None),
    (".pytest.ini", None),
    ("pyproject.toml", re.compile(r"^\[tool\.pytest\.ini_options\]", re.MULTILINE)),
    ("tox.ini", re.compile(r"^\[pytest\]", re.MULTILINE)),
    ("setup.cfg", re.compile(r"^\[tool:pytest\]", re.MULTILINE)),
)


class HiddenTestsError(RuntimeError):
    """The patch changed the tree so that the hidden tests cannot be put in place."""


def hidden_test_roots(test_files: list[str]) -> list[str]:
    """The topmost test directory above each file (the file itself where none is), nested ones dropped."""
    roots = []
    for name in test_files:
        parts = PurePosixPath(name).parts
        index = next((i for i, part in enumerate(parts[:-1]) if part.lower() in TEST_DIR_NAMES), len(parts) - 1)
        roots.append("/".join(parts[: index + 1]))
    unique = sorted(set(roots))
    return [root for root in unique if not any(root.startswith(other + "/") for other in unique)]


def restore_test_roots(tree: Path, base: Path, roots: list[str]) -> None:
    """Replaces each root in `tree` by the base's copy (or removes it where the base has none)."""
    for root in roots:
        parts = PurePosixPath(root).parts
        for depth in range(1, len(parts)):
            ancestor = tree.joinpath(*parts[:depth])
            if os.path.lexists(ancestor) and (ancestor.is_symlink() or not ancestor.is_dir()):
                raise HiddenTestsError(f"the patch replaced {'/'.join(parts[:depth])}, a directory of the hidden tests")
        target = tree.joinpath(*parts)
        _remove(target)
        original = base.joinpath(*parts)
        if os.path.lexists(original):
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_tree(original, target)


def restore_conftests(tree: Path, base: Path, roots: list[str]) -> None:
    """Removes every `conftest.py` outside the test roots and puts the base's back."""
    for path in _find(tree, lambda name, is_dir: name == "conftest.py"):
        relative = path.relative_to(tree).as_posix()
        if not any(relative.startswith(root + "/") for root in roots):
            _remove(path)
    for path in _find(base, lambda name, is_dir: name == "conftest.py"):
        relative = path.relative_to(base)
        if not any(relative.as_posix().startswith(root + "/") for root in roots):
            target = tree / relative
            real = Path(os.path.realpath(target.parent))
            if target.parent.is_dir() and (real == tree.resolve() or tree.resolve() in real.parents):
                shutil.copy2(path, target)  # never through a link leading out of the tree


def remove_bytecode(tree: Path) -> None:
    for path in _find(tree, lambda name, is_dir: name == "__pycache__" if is_dir else name.endswith((".pyc", ".pyo"))):
        _remove(path)


def pytest_config(base: Path, test_files: list[str]) -> Path | None:
    """The base's configuration file that pytest would use for `test_files` (relative to `base`)."""
    if not test_files:
        return None
    common = PurePosixPath(os.path.commonpath([str(PurePosixPath(name).parent) for name in test_files]))
    for directory in (common, *common.parents):
        for name, section in CONFIG_FILES:
            candidate = base / directory / name
            if candidate.is_file() and not candidate.is_symlink():
                if section is None or section.search(candidate.read_text(encoding="utf-8", errors="replace")):
                    return candidate.relative_to(base)
    return None


def _find(top: Path, match: Callable[[str, bool], bool]) -> list[Path]:
    """Paths under `top` whose (name, is_dir) `match` accepts, symbolic links not followed."""
    found = []
    for directory, dirnames, filenames in os.walk(top):
        found += [Path(directory) / name for name in dirnames if match(name, True)]
        dirnames[:] = [name for name in dirnames if not match(name, True)]
        found += [Path(directory) / name for name in filenames if match(name, False)]
    return found


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
