"""SCOPE environments: dialogue benchmarks where the agent and the user simulator are both agents.

Importing this package registers every environment with Gymnasium, so
`gymnasium.make("scope_envs:scope/<Name>-v0", simulator=...)` works with no other import.
"""

from scope_envs import catalog as _catalog
from scope_envs.core import (
    AGENT,
    SIDES,
    USER,
    AgentView,
    DialogueBatch,
    DialogueEnv,
    EpisodeEnd,
    InvalidAction,
    Message,
    PolicyError,
    Reply,
    Reward,
    Scenario,
    ScriptedSimulator,
    Simulator,
    ThreadVectorEnv,
    ToolCall,
    ToolError,
    ToolResult,
    UnicodeText,
    UserView,
    find_env,
    register_dialogue_env,
    run_episodes,
)

__version__ = "0.1.0"

_catalog.register_all()

__all__ = [
    "AGENT",
    "SIDES",
    "USER",
    "AgentView",
    "DialogueBatch",
    "DialogueEnv",
    "EpisodeEnd",
    "InvalidAction",
    "Message",
    "PolicyError",
    "Reply",
    "Reward",
    "Scenario",
    "ScriptedSimulator",
    "Simulator",
    "ThreadVectorEnv",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "UnicodeText",
    "UserView",
    "find_env",
    "register_dialogue_env",
    "run_episodes",
]
