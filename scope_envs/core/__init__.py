"""The contracts every layer shares: chat types, the chat-policy contract, the `DialogueEnv` base,
views, batching, the rollout protocol, policy specs and the registry of environments."""

from scope_envs.core.actions import ParsedAction, parse_action
from scope_envs.core.batch import DialogueBatch, EpisodeResult
from scope_envs.core.chat import Message, ToolCall, function_tool
from scope_envs.core.dialogue import (
    AGENT,
    SIDES,
    USER,
    DialogueEnv,
    EpisodeEnd,
    InvalidAction,
    Reward,
    Scenario,
    ToolResult,
    other_side,
    user_components,
    user_reward_from,
)
from scope_envs.core.episodes import run_episodes
from scope_envs.core.jsonable import jsonable
from scope_envs.core.policy import ChatPolicy, PolicyError, Reply, Simulator, SimulatorError, Usage, run_sync
from scope_envs.core.registration import REGISTERED, DialogueEnvInfo, find_env, register_dialogue_env, reply_rules_for
from scope_envs.core.rules import ReplyRule
from scope_envs.core.scripted import FunctionSimulator, ScriptedSimulator
from scope_envs.core.seeding import derive_seed
from scope_envs.core.spaces import UnicodeText
from scope_envs.core.specs import make_policy, register_policy_backend, resolve_policy
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
    "FunctionSimulator",
    "InvalidAction",
    "Message",
    "ParsedAction",
    "PolicyError",
    "REGISTERED",
    "Reply",
    "ReplyRule",
    "Reward",
    "Scenario",
    "ScriptedSimulator",
    "Simulator",
    "SimulatorError",
    "ThreadVectorEnv",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "UnicodeText",
    "Usage",
    "UserView",
    "derive_seed",
    "find_env",
    "jsonable",
    "function_tool",
    "make_policy",
    "other_side",
    "parse_action",
    "register_dialogue_env",
    "register_policy_backend",
    "reply_rules_for",
    "resolve_policy",
    "run_episodes",
    "run_sync",
    "user_components",
    "user_reward_from",
]
