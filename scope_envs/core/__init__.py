"""The dialogue environment contract: chat types, the `DialogueEnv` base, views, batching."""

from scope_envs.core.actions import ParsedAction, parse_action
from scope_envs.core.batch import DialogueBatch, EpisodeResult, run_episodes
from scope_envs.core.chat import Message, ToolCall, function_tool
from scope_envs.core.dialogue import AGENT, SIDES, USER, DialogueEnv, EpisodeEnd, Reward, Scenario, other_side
from scope_envs.core.policy import ChatPolicy, PolicyError
from scope_envs.core.registration import REGISTERED, DialogueEnvInfo, register_dialogue_env
from scope_envs.core.spaces import UnicodeText
from scope_envs.core.tools import ToolError
from scope_envs.core.vector import ThreadVectorEnv
from scope_envs.core.views import AgentView, DialogueView, UserView

__all__ = [
    "AGENT",
    "SIDES",
    "USER",
    "AgentView",
    "ChatPolicy",
    "DialogueBatch",
    "DialogueEnv",
    "DialogueEnvInfo",
    "DialogueView",
    "EpisodeEnd",
    "EpisodeResult",
    "Message",
    "ParsedAction",
    "PolicyError",
    "REGISTERED",
    "Reward",
    "Scenario",
    "ThreadVectorEnv",
    "ToolCall",
    "ToolError",
    "UnicodeText",
    "UserView",
    "function_tool",
    "other_side",
    "parse_action",
    "register_dialogue_env",
    "run_episodes",
]
