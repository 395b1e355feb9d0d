"""Gymnasium single-agent views of a `DialogueEnv`: play one side, a plugged policy plays the other.

`AgentView` (registered as `scope/<Name>-v0`) plays the agent with `simulator=` as the user;
`UserView` (`scope/<Name>-User-v0`) plays the user with `agent=` as the agent. Each `step` takes
one action of the viewed side and then lets the partner speak until it is the viewed side's turn
again or the episode ends. Each partner reply is seeded from the episode seed (drawn from the
view's `np_random`) and its position in the conversation, so a deterministic
partner (scripted) makes whole episodes reproducible from `reset(seed=...)`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from scope_envs.core.batch import play_turn
from scope_envs.core.dialogue import AGENT, SIDES, USER, DialogueEnv, Transition, other_side
from scope_envs.core.policy import is_deterministic
from scope_envs.core.registration import find_env
from scope_envs.core.seeding import MAX_SEED, derive_seed
from scope_envs.core.specs import import_object, resolve_policy

EnvSource = DialogueEnv | str | Callable[..., DialogueEnv]
StepResult = tuple[str, float, bool, bool, dict[str, Any]]


def build_env(env: EnvSource, **env_kwargs: Any) -> DialogueEnv:
    """A `DialogueEnv` from an instance, a registered name or id (`"Name"`, `"scope/Name-v0"`), an
    import path (`"module:Class"`) or a factory."""
    if isinstance(env, DialogueEnv):
        if env_kwargs:
            raise TypeError(f"keyword arguments {sorted(env_kwargs)} cannot be applied to an env instance")
        return env
    if isinstance(env, str) and "/" not in env.partition(":")[2] and ":" in env:
        factory = import_object(env)
    elif isinstance(env, str):
        return find_env(env).make(**env_kwargs)
    else:
        factory = env
    built = factory(**env_kwargs)
    if not isinstance(built, DialogueEnv):
        raise TypeError(f"{env!r} built a {type(built).__name__}, not a DialogueEnv")
    return built


class DialogueView(gym.Env[str, Any]):
    """One side of a `DialogueEnv` as a Gymnasium env; see the module docstring."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"]}
    side: ClassVar[str]

    def __init__(
        self, env: EnvSource, partner: Any = None, *, render_mode: str | None = None, **env_kwargs: Any
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.dialogue = build_env(env, **env_kwargs)
        self.partner_side = other_side(self.side)
        self.partner = resolve_policy(
            "scripted" if partner is None else partner, env=self.dialogue, side=self.partner_side
        )
        self.observation_space = self.dialogue.observation_space(self.side)
        self.action_space = self.dialogue.action_space(self.side)
        self._spec: EnvSpec | None = None
        self._final: StepResult | None = None
        self._over = True

    @property
    def deterministic(self) -> bool:
        return is_deterministic(self.partner)

    @property  # type: ignore[override]
    def spec(self) -> EnvSpec | None:
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        # Registered as nondeterministic (partners are usually language models); a partner that
        # declares itself deterministic makes this instance deterministic, and Gymnasium's
        # checker then holds it to that.
        if value is not None and value.nondeterministic and self.deterministic:
            value = dataclasses.replace(value, nondeterministic=False)
        self._spec = value

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        observations, infos = self.dialogue.reset(seed=seed, options=options)
        self._episode_seed = int(self.np_random.integers(MAX_SEED))
        self._over = False
        self._final = None
        nothing = dict.fromkeys(SIDES, False)
        obs, reward, terminated, truncated, info = self._let_partner_speak(
            (observations, dict.fromkeys(SIDES, 0.0), nothing, nothing, infos)
        )
        if terminated or truncated:
            # The episode ended before this side spoke (e.g. the partner failed): the next step reports it.
            self._final = (obs, reward, terminated, truncated, info)
        return obs, info

    def step(self, action: Any) -> StepResult:
        if self._over:
            raise RuntimeError("the episode is over: call reset() before step()")
        if self._final is not None:
            obs, reward, terminated, truncated, info = self._final
            self._final = None
            self._over = True
            return obs, reward, terminated, truncated, copy.deepcopy(info)
        result = self._let_partner_speak(self.dialogue.step({self.side: action, self.partner_side: ""}))
        self._over = result[2] or result[3]
        return result

    def _let_partner_speak(self, transition: Transition) -> StepResult:
        """Lets the partner take its turns until this side is to speak or the episode ends."""
        partner_errors: list[str] = []
        while self.dialogue.end is None and self.dialogue.to_speak == self.partner_side:
            seed = derive_seed(self._episode_seed, len(self.dialogue.log))
            transition = play_turn(self.dialogue, self.partner_side, self.partner, seed)
            partner_errors.extend(_errors_of(self.dialogue.chat_infos[self.partner_side]))
        observations, rewards, terminations, truncations, infos = transition
        info = infos[self.side]
        if partner_errors:
            info["partner_errors"] = partner_errors
        side = self.side
        return observations[side], float(rewards[side]), bool(terminations[side]), bool(truncations[side]), info

    def action_masks(self) -> Any:
        """The actions this side may take now (bool array), for masking learners such as
        sb3-contrib's `MaskablePPO`; only for envs whose `DialogueEnv` has `action_mask(side)`."""
        if not hasattr(self.dialogue, "action_mask"):
            raise AttributeError(f"{type(self.dialogue).__name__} has no action mask: its actions are text")
        return self.dialogue.action_mask(self.side)

    def render(self) -> str | None:
        text = self.dialogue.render() if self.dialogue.scenario is not None else ""
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        self.dialogue.close()
        super().close()


def _errors_of(info: dict[str, Any]) -> list[str]:
    """The errors one step of a side produced: an invalid action, or tool calls that failed."""
    errors = [info["error"]] if info.get("error") else []
    errors += [result["error"] for result in info.get("tool_results", []) if result["error"]]
    return errors


class AgentView(DialogueView):
    """Plays the agent side; `simulator=` (a spec, a simulator, or a callable) plays the user."""

    side = AGENT

    def __init__(
        self, env: EnvSource, simulator: Any = None, *, render_mode: str | None = None, **env_kwargs: Any
    ) -> None:
        super().__init__(env, simulator, render_mode=render_mode, **env_kwargs)


class UserView(DialogueView):
    """Plays the user side (to train a user simulator); `agent=` plays the agent."""

    side = USER

    def __init__(self, env: EnvSource, agent: Any = None, *, render_mode: str | None = None, **env_kwargs: Any) -> None:
        super().__init__(env, agent, render_mode=render_mode, **env_kwargs)
