from __future__ import annotations

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
