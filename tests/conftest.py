from __future__ import annotations

from pathlib import Path

import pytest
from helpdesk_env import HelpdeskEnv
from local_data import P4G, TAU3, require

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


@pytest.fixture(scope="session")
def p4g_dir() -> Path:
    """The raw Persuasion for Good files named by $SCOPE_P4G_DATA (never copied into the repository)."""
    return require(P4G)


@pytest.fixture(scope="session")
def tau3_dir() -> Path:
    """τ³-bench 1.0.0's task files named by $SCOPE_TAU3_DATA, which `task_set="tau3"` then reads."""
    return require(TAU3)


@pytest.fixture
def no_corpus(tmp_path, monkeypatch):
    """No corpus anywhere: no env var, an empty cache, and a download that fails at once."""
    monkeypatch.delenv("SCOPE_P4G_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SCOPE_P4G_URL", "http://127.0.0.1:9/")  # the discard port: connection refused
