"""The registry of dialogue environments: Gymnasium ids, and what each benchmark declares.

`register_dialogue_env` registers a `DialogueEnv` under `scope/<Name>-v0` (agent view) and
`scope/<Name>-User-v0` (user view), or, for a later version registered as `<Name>-vN`, under
`scope/<Name>-vN` and `scope/<Name>-User-vN`; it records what generic layers may ask of the benchmark
without naming it: its fast vector rollout (`rollout`, like Gymnasium's `vector_entry_point`), its
dialogue rules (`reply_rules`) and its own policy spec backends (`policies`). Everything is given
as `"module:attribute"` strings and imported on first use, so registering costs no import.

`find_env` is the one lookup of an environment by name or id.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import gymnasium as gym

from scope_envs.core.errors import UsageError
from scope_envs.core.rules import ReplyRule
from scope_envs.core.specs import import_object, register_policy_backend

NAMESPACE = "scope"
_VERSIONED = re.compile(r"(?P<base>.+?)(?P<user>-User)?-v(?P<version>[0-9]+)")


def _base_and_version(name: str) -> tuple[str, int]:
    match = _VERSIONED.fullmatch(name)
    return (match["base"], int(match["version"])) if match and not match["user"] else (name, 0)


@dataclass(frozen=True)
class DialogueEnvInfo:
    name: str
    entry_point: str  # "module:Class" of the DialogueEnv
    description: str
    rollout: str | None = None  # "module:function" of a vectorized rollout (see scope_envs.core.rollout)
    reply_rules: str | None = None  # "module:attribute" of a sequence of `ReplyRule`
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    human_reference: str | None = None  # "module:function": (env, *, split, limit) -> `HumanReference`
    runs_code: bool = False  # its tools execute code a player writes: never offered to people unless asked for

    @property
    def agent_id(self) -> str:
        base, version = _base_and_version(self.name)
        return f"{NAMESPACE}/{base}-v{version}"

    @property
    def user_id(self) -> str:
        base, version = _base_and_version(self.name)
        return f"{NAMESPACE}/{base}-User-v{version}"

    def env_class(self) -> type:
        return import_object(self.entry_point)

    def make(self, **kwargs: Any) -> Any:
        """A new instance of the env, with the registered defaults under `kwargs`."""
        env_class = self.env_class()
        known = _keyword_arguments(env_class)
        unknown = sorted(set(kwargs) - set(known)) if known is not None else []
        if unknown:  # a typo in an --env-arg, said as such rather than as a TypeError deep in a constructor
            raise UsageError(f"{self.name} takes no argument {', '.join(unknown)}; it takes {', '.join(known)}")
        return env_class(**{**self.kwargs, **kwargs})

    def rollout_function(self) -> Any:
        """The benchmark's vectorized rollout, or None: rollouts then play chat episodes."""
        return import_object(self.rollout) if self.rollout else None

    def human_reference_function(self) -> Any:
        """The benchmark's loader of human reference data (see `scope_envs.core.reference`), or None."""
        return import_object(self.human_reference) if self.human_reference else None


REGISTERED: dict[str, DialogueEnvInfo] = {}


def _keyword_arguments(env_class: type) -> list[str] | None:
    """The keyword arguments of the class's constructor, following `**kwargs` passed on to its
    bases; None where the chain ends in a `**kwargs` nobody names."""
    names: list[str] = []
    for cls in env_class.__mro__:
        if "__init__" not in vars(cls):
            continue
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
        names += [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return sorted(set(names))
    return None


def register_dialogue_env(
    name: str,
    entry_point: str,
    description: str,
    *,
    rollout: str | None = None,
    reply_rules: str | None = None,
    policies: Mapping[str, str] | None = None,
    vector_entry_point: str | None = None,
    human_reference: str | None = None,
    runs_code: bool = False,
    **kwargs: Any,
) -> DialogueEnvInfo:
    """Registers both views of the `DialogueEnv` at `entry_point`; `kwargs` are its defaults.

    `policies` maps spec backend names the benchmark provides (e.g. its simulator families) to
    `"module:factory"` (an unknown spec on an env lists only the backends of its own class and the
    generic ones). Both views are registered as nondeterministic, as their partner is usually a
    language model; a view whose partner declares itself deterministic (scripted) reports itself
    deterministic. `vector_entry_point` is the batched agent view that
    `gymnasium.make_vec(id, vectorization_mode="vector_entry_point")` builds. The views make their
    env through `find_env(name).make`, so `kwargs` are the one set of defaults of every way of
    making the env.
    `human_reference` (`"module:function"`, `function(env, *, split, limit) -> HumanReference`)
    loads people's conversations on the env's scenarios, for simulator fidelity. `runs_code`
    declares that the env's tools execute what a player writes (commands, programs): the web app
    then offers it only when its operator names it, and never on a public address.
    """
    info = DialogueEnvInfo(
        name, entry_point, description, rollout, reply_rules, dict(kwargs), human_reference, runs_code
    )
    for env_id, view in ((info.agent_id, "AgentView"), (info.user_id, "UserView")):
        if env_id in gym.registry:
            del gym.registry[env_id]  # re-registration on module reload replaces, not warns
        gym.register(
            id=env_id,
            entry_point=f"scope_envs.core.views:{view}",
            vector_entry_point=vector_entry_point if view == "AgentView" else None,
            kwargs={"env": name},
            nondeterministic=True,
        )
    for backend, factory in (policies or {}).items():
        register_policy_backend(backend, factory, env_class=entry_point)
    REGISTERED[name] = info
    _load_rules.cache_clear()
    return info


def find_env(name: str) -> DialogueEnvInfo:
    """A registered env by name (`Name`, `Name-v1`) or Gymnasium id (`scope/Name-v0`,
    `scope/Name-User-v0`, `scope_envs:scope/Name-v1`)."""
    if not isinstance(name, str):
        raise TypeError(f"an environment is named by a string, got {type(name).__name__}")
    bare = name.rpartition(":")[2].removeprefix(f"{NAMESPACE}/")
    match = _VERSIONED.fullmatch(bare)
    if match:
        bare = match["base"] if match["version"] == "0" else f"{match['base']}-v{match['version']}"
    if bare not in REGISTERED:
        known = ", ".join(REGISTERED) or "none"
        raise UsageError(f"unknown environment {name!r}; registered: {known} (`scope envs` lists them)")
    return REGISTERED[bare]


def reply_rules_for(system_prompt: str) -> list[str]:
    """The rules of every registered benchmark that apply to a view with this system prompt."""
    return [rule.rule for rule in _load_rules() if rule.applies_to(system_prompt)]


@cache
def _load_rules() -> tuple[ReplyRule, ...]:
    paths = dict.fromkeys(info.reply_rules for info in REGISTERED.values() if info.reply_rules)  # each once
    return tuple(rule for path in paths for rule in import_object(path))
