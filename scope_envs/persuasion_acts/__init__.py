"""The act-level Persuasion for Good testbed: simulator collapse and its remedies, on a CPU in minutes."""

from scope_envs.persuasion_acts.engine import ActsBatch
from scope_envs.persuasion_acts.env import PersuasionActsEnv, parallel_env

__all__ = ["ActsBatch", "PersuasionActsEnv", "parallel_env"]
