"""Install hints install this project: every install hint with an extra in the repository names this
distribution and one of its extras, and a missing dependency stops a command with one line saying
which extra to install."""

import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

from scope_envs.core.extras import DISTRIBUTION, install_command

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HINT = re.compile(r"pip install (?:-[-\w]+ )*[\"']?(-e )?[\"']?([\w.-]+)\[([\w,]+)\]")


def hinted_files():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in listed.splitlines():
        path = ROOT / name
        if path.suffix in {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ""} and path.is_file():
            yield path


def test_the_distribution_is_named_once_and_its_dev_extra_names_itself():
    assert PROJECT["name"] == DISTRIBUTION
    assert any(item.startswith(f"{DISTRIBUTION}[") for item in PROJECT["optional-dependencies"]["dev"])


def test_every_install_hint_names_this_distribution_and_one_of_its_extras():
    extras = set(PROJECT["optional-dependencies"])
    hints = []
    for path in hinted_files():
        for match in HINT.finditer(path.read_text(errors="replace")):
            editable, name, wanted = match.groups()
            hints.append(match.group(0))
            allowed = {"."} if editable else {DISTRIBUTION, "."}
            assert name in allowed, f"{path}: {match.group(0)}"
            if wanted != "EXTRA":  # the placeholder of a sentence about every extra
                assert set(wanted.split(",")) <= extras, f"{path}: {match.group(0)}"
    assert len(hints) > 10  # the pattern does find them


def run_blocked(blocked, *args):
    """`scope ARGS` in a process where the named modules cannot be imported, as on a bare install."""
    code = (
        f"import sys\nfor name in {blocked!r}: sys.modules[name] = None\n"
        "from baselines.cli import main\nsys.exit(main())"
    )
    environment = {**os.environ, "SCOPE_P4G_DATA": ""}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=environment)


def test_scope_diagnose_without_the_hf_extra_names_it_in_one_line():
    for blocked in (["transformers"], ["torch", "transformers"]):
        done = run_blocked(blocked, "diagnose", "--env", "P4G", "--simulator", "scripted", "--simulator", "smollm2")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert install_command("hf") in done.stderr.splitlines()[-1]


def test_scope_train_without_the_hf_extra_names_it_in_one_line():
    done = run_blocked(["torch", "transformers"], "train", "p4g_tiny")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert install_command("hf") in done.stderr.splitlines()[-1]
