"""Registers a `DialogueEnv` under Gymnasium ids `scope/<Name>-v0` (agent view) and `scope/<Name>-User-v0`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

NAMESPACE = "scope"


@dataclass(frozen=True)
class DialogueEnvInfo:
    name: str
    entry_point: str  # "module:Class" of the DialogueEnv
    description: str

    @property
    def agent_id(self) -> str:
        return f"{NAMESPACE}/{self.name}-v0"

    @property
    def user_id(self) -> str:
        return f"{NAMESPACE}/{self.name}-User-v0"


REGISTERED: dict[str, DialogueEnvInfo] = {}


def register_dialogue_env(name: str, entry_point: str, description: str, **kwargs: Any) -> DialogueEnvInfo:
    """Registers both views of the `DialogueEnv` at `entry_point`; `kwargs` are its defaults.

    Both are registered as nondeterministic, as their partner is usually a language model; a
    view whose partner declares itself deterministic (scripted) reports itself deterministic.
    """
    info = DialogueEnvInfo(name, entry_point, description)
    for env_id, view in ((info.agent_id, "AgentView"), (info.user_id, "UserView")):
        if env_id in gym.registry:
            del gym.registry[env_id]  # re-registration on module reload replaces, not warns
        gym.register(
            id=env_id,
            entry_point=f"scope_envs.core.views:{view}",
            kwargs={"env": entry_point, **kwargs},
            nondeterministic=True,
        )
    REGISTERED[name] = info
    return info
