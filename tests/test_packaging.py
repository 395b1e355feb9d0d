import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "tau2", "openai", "anthropic", "vllm", "ray", "baselines")


def test_importing_the_envs_and_sims_stays_light():
    code = f"import sys, scope_envs, sims; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_dependencies_point_one_way():
    """scope_envs never imports baselines; sims never imports baselines."""
    importing_baselines = re.compile(r"^\s*(from|import)\s+baselines\b", re.MULTILINE)
    for package in ("scope_envs", "sims"):
        for path in (ROOT / package).rglob("*.py"):
            assert not importing_baselines.search(path.read_text()), path


def test_layout_and_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(project["optional-dependencies"]) >= {"tau2", "hf", "api", "vllm", "ray", "dev"}
    assert project["scripts"]["scope"] == "baselines.cli:main"
    for folder in ("scope_envs", "sims", "baselines", "docs", "tests"):
        assert (ROOT / folder).is_dir()
