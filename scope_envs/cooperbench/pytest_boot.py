"""The hidden tests' entry point in the sandbox: `python -I -B -c <this source> [--path D | --plugin M]... -- ARGS`.

`-I` keeps the tree off `sys.path` while the interpreter starts (no `PYTHONPATH`, no script
directory, no user site: no `sitecustomize`, `usercustomize` or `.pth` file of the tree runs) and
makes Python ignore every `PYTHON*` variable. pytest, its plugins and the modules they import
come from the test environment before the tree's directories (`--path`) go on `sys.path`: after
the standard library, before site-packages, so that the code under test wins over an installed
copy of itself but never over pytest or the standard library. Plugins load only by name here
(`--plugin`), never from entry points, and `PYTEST_*` variables are dropped. Runs in the test
environment's interpreter, so it needs nothing but the standard library and pytest.
"""

from __future__ import annotations

import importlib
import os
import sys

PRELOADED = ("iniconfig", "packaging.version", "packaging.requirements", "tomli", "exceptiongroup")


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    pairs = list(zip(argv[:separator:2], argv[1:separator:2]))
    for name in [name for name in os.environ if name.startswith("PYTEST_")]:
        del os.environ[name]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.path[:] = [entry for entry in sys.path if entry not in ("", os.getcwd())]
    import _pytest.junitxml  # noqa: F401 - imported before the tree can shadow anything
    import pytest

    for name in PRELOADED:  # what pytest imports lazily, when the tree is already on sys.path
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    plugins = [importlib.import_module(value) for flag, value in pairs if flag == "--plugin"]
    site = next((i for i, entry in enumerate(sys.path) if entry.endswith(("site-packages", "dist-packages"))), None)
    position = len(sys.path) if site is None else site
    sys.path[position:position] = [value for flag, value in pairs if flag == "--path"]
    return int(pytest.main(argv[separator + 1 :], plugins=plugins))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
