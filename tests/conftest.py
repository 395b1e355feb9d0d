from __future__ import annotations

from pathlib import Path

import pytest
from helpdesk_env import HelpdeskEnv

from scope_envs.core.registration import REGISTERED, register_dialogue_env


@pytest.fixture(scope="session")
def helpdesk_ids():
    """Registers the test env like a built-in one, so views are made through `gymnasium.make`."""
    info = register_dialogue_env("TestHelpdesk", "helpdesk_env:HelpdeskEnv", "order-support test env")
    yield info
    REGISTERED.pop("TestHelpdesk", None)


@pytest.fixture
def helpdesk():
    env = HelpdeskEnv()
    yield env
    env.close()


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def p4g_dir() -> Path:
    """The raw Persuasion for Good files beside the repository (never copied into it)."""
    path = SHARED_DATA / "p4g"
    if not (path / "full_info.csv").is_file():
        pytest.skip(f"the Persuasion for Good files are not at {path}")
    return path


@pytest.fixture
def no_corpus(tmp_path, monkeypatch):
    """No corpus anywhere: no env var, an empty cache, and a download that fails at once."""
    monkeypatch.delenv("SCOPE_P4G_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SCOPE_P4G_URL", "http://127.0.0.1:9/")  # the discard port: connection refused
