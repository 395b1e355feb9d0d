"""`PersuasionActsEnv`: Persuasion for Good at the level of dialogue acts, as a `DialogueEnv`.

Each side's action is one of its acts: an index into `Discrete` (array-based RL agents) or text
that names the act (`[emotion-appeal] ...`, the way the turns are rendered, so language-model
agents play the same game). What a side observes is chosen with `obs=` (see
`scope_envs.persuasion_acts.spaces`): `features`, a numeric vector of the side's situation
(`AGENT_FEATURES` / `USER_FEATURES`; the persuadee's persona is its own and hidden from the
persuader, as in P4G; the default), `text`, the side's view of the conversation, or `both`.
`action_mask=True` adds the allowed acts to the observation; otherwise `info["action_mask"]` holds
them as an int8 array. `info="lean"` (the default) keeps only numeric entries in the infos, the
same at every step, so that PettingZoo's API tests, TorchRL and RLlib take the env as is;
`info="full"` returns the dialogue infos (views, tools, reward breakdown), which chat policies
read from `env.chat_infos` either way. The defaults are those of every way of making the env:
`parallel_env()`, `PersuasionActsEnv()`, `find_env("PersuasionActs").make()` and the Gymnasium
views. The dynamics are `ActsBatch`'s, for a batch of one.

`version=1` (`scope/PersuasionActs-v1`) is the corpus-fitted persuadee population with its refusal
rules (`scope_envs.persuasion_acts.population`); version 0 stays for old results. `version=2`
(`scope/PersuasionActsPlanted-v0`) is the mechanism testbed: version 1's rules and features with a
persuadee population planted in code (`scope_envs.persuasion_acts.planted`), a mechanism test and
not a claim about P4G.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from scope_envs.core.actions import parse_action
from scope_envs.core.chat import Message
from scope_envs.core.dialogue import (
    AGENT,
    USER,
    USER_REWARDS,
    DialogueEnv,
    EpisodeEnd,
    InvalidAction,
    Reward,
    Scenario,
    Transition,
    user_components,
    user_reward_from,
)
from scope_envs.core.render import render_view
from scope_envs.persuasion_acts.acts import PERSUADEE_ACTS, PERSUADER_ACTS, act_text, parse_act
from scope_envs.persuasion_acts.engine import V0, ActsBatch, Rules
from scope_envs.persuasion_acts.model import (
    AGENT_FEATURES,
    HORIZON,
    N_PERSONA,
    PERSONA_TRAITS,
    USER_FEATURES,
    load_reference,
)
from scope_envs.persuasion_acts.planted import population_for
from scope_envs.persuasion_acts.population import USER_FEATURES_V1
from scope_envs.persuasion_acts.spaces import assemble, check_options, observation_space

PERSONAS_PER_SPLIT = {"train": 1000, "test": 200}
ACTS = {AGENT: PERSUADER_ACTS, USER: PERSUADEE_ACTS}
VERSIONS = (0, 1, 2)
SCRIPTED_PERSUADEES = {  # the population of versions 1 and 2, built with no arguments
    1: "scope_envs.persuasion_acts.mixture:MixtureFamily",
    2: "scope_envs.persuasion_acts.mixture:planted_persuadee",
}
_PERSONA_LINE = re.compile(r"^Persona \(Big Five, z-scores\): (.*)$", re.MULTILINE)
_TEMPERAMENT_LINE = re.compile(r"^Temperament \(quantile\): ([0-9.]+)$", re.MULTILINE)


def rules_of(version: int) -> Rules:
    if version not in VERSIONS:
        raise ValueError(f"PersuasionActs version must be one of {VERSIONS}, got {version!r}")
    if version == 0:
        return V0
    return Rules(version=version, refusal_ends=True, max_requests=population_for(version).max_requests)


def persona_line(persona: np.ndarray) -> str:
    line = "Persona (Big Five, z-scores): " + ", ".join(
        f"{trait} {value:+.3f}" for trait, value in zip(PERSONA_TRAITS, persona)
    )
    return line + (f"\nTemperament (quantile): {persona[N_PERSONA]:.3f}" if len(persona) > N_PERSONA else "")


def parse_persona(system_prompt: str) -> np.ndarray:
    match = _PERSONA_LINE.search(system_prompt)
    if match is None:
        raise ValueError("the persuadee's system prompt has no persona line")
    traits = [float(item.rsplit(" ", 1)[1]) for item in match.group(1).split(", ")]
    temperament = _TEMPERAMENT_LINE.search(system_prompt)
    return np.array(traits + ([float(temperament.group(1))] if temperament else []))


def persuader_prompt(exchanges: int) -> str:
    return (
        "You are the persuader in a Persuasion for Good conversation: get the persuadee to donate part of "
        f"their $2 task payment to Save the Children, in at most {exchanges} exchanges. Each of your turns is "
        f"one act; write it as [act] followed by what you say. Acts: {', '.join(PERSUADER_ACTS)}."
    )


def persuadee_prompt(persona: np.ndarray) -> str:
    return (
        "You are the persuadee in a Persuasion for Good conversation. You earned $2 for a task; the other "
        "person may ask you to donate part of it. Each of your turns is one act; write it as [act] followed "
        f"by what you say. Acts: {', '.join(PERSUADEE_ACTS)}. Donation decisions (agree, disagree, an amount) "
        f"answer a proposition or a request for the amount.\n{persona_line(persona)}"
    )


def replay(view: list[Message], side: str, exchanges: int = 10**9, rules: Rules = V0) -> ActsBatch:
    """The state of an episode rebuilt from one side's view (its own turns are `assistant`); the
    features do not depend on the episode's length limit, so by default there is none."""
    width = N_PERSONA + (rules.version > 0)
    persona = parse_persona(view[0].text) if side == USER else np.zeros(width)
    if len(persona) != width:
        raise ValueError(f"the persuadee's system prompt is not one of version {rules.version}")
    batch = ActsBatch(persona[None], exchanges, rules)
    for message in view[1:]:
        agent_turn = (message.role == "assistant") == (side == AGENT)
        act = parse_act(ACTS[AGENT if agent_turn else USER], message.text)
        if act is None or not batch.live[0]:
            raise ValueError(f"cannot replay the turn {message.text!r}")
        (batch.step_agent if agent_turn else batch.step_user)(np.array([0]), np.array([act]))
    return batch


class PersuasionActsEnv(DialogueEnv):
    """See the module docstring and docs/envs/persuasion_acts.md."""

    metadata = {**DialogueEnv.metadata, "name": "persuasion_acts_v0"}  # noqa: RUF012
    scripted_policies = {  # noqa: RUF012  (version 0's; later versions' persuadee is their population, see __init__)
        "user": "scope_envs.persuasion_acts.simulators:ActFamily",
        "agent": "scope_envs.persuasion_acts.simulators:ScriptedPersuader",
    }

    def __init__(
        self,
        *,
        exchanges: int = HORIZON,
        user_reward: str = "adversarial",
        obs: str = "features",
        action_mask: bool = False,
        info: str = "lean",
        version: int = 0,
        **kwargs: Any,
    ) -> None:
        check_options(obs, info)
        self.rules = rules_of(version)
        if user_reward not in USER_REWARDS:
            raise ValueError(f"user_reward must be one of {USER_REWARDS}, got {user_reward!r}")
        if exchanges < 1:
            raise ValueError("exchanges must be at least 1")
        if kwargs.setdefault("max_turns", 2 * exchanges) != 2 * exchanges:
            raise ValueError("an exchange is two turns: set exchanges, not max_turns")
        super().__init__(**kwargs)
        self.exchanges = exchanges
        self.user_reward = user_reward
        self.obs, self.mask_in_obs, self.info_mode = obs, bool(action_mask), info
        self.version = version
        if version > 0:  # the population, not a version-0 family that cannot read its persona
            self.scripted_policies = {**self.scripted_policies, "user": SCRIPTED_PERSUADEES[version]}
        self.metadata = {**self.metadata, "name": f"persuasion_acts_v{version}"}
        self.reference = load_reference() if version == 0 else population_for(version)
        self.personas = {split: self.reference.personas(split, n) for split, n in PERSONAS_PER_SPLIT.items()}
        width = {AGENT: len(AGENT_FEATURES), USER: len(USER_FEATURES if version == 0 else USER_FEATURES_V1)}
        self.observation_spaces = {
            side: observation_space(width[side], len(ACTS[side]), obs, self.mask_in_obs) for side in (AGENT, USER)
        }
        self.action_spaces = {side: spaces.Discrete(len(ACTS[side])) for side in (AGENT, USER)}
        self.batch = ActsBatch(np.zeros((1, self.personas["train"].shape[1])), exchanges, self.rules)

    def task_ids(self, split: str = "train") -> list[str]:
        return [f"{split}-{i:05d}" for i in range(PERSONAS_PER_SPLIT[split])]

    def persona(self, task_id: str) -> np.ndarray:
        split, _, number = task_id.partition("-")
        known = split in self.personas and re.fullmatch(r"[0-9]{5}", number)
        if not known or int(number) >= len(self.personas[split]):
            raise ValueError(f"unknown PersuasionActs task_id {task_id!r}: use e.g. 'train-00042' or 'test-00007'")
        return self.personas[split][int(number)]

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        task_id = options.get("task_id")
        if task_id is None:
            split = options.get("split", "train")
            if split not in PERSONAS_PER_SPLIT:
                raise ValueError(f"split must be 'train' or 'test', got {split!r}")
            task_id = f"{split}-{int(rng.integers(PERSONAS_PER_SPLIT[split])):05d}"
        persona = self.persona(task_id)
        self.batch = ActsBatch(persona[None], self.exchanges, self.rules)
        return Scenario(
            scenario_id=task_id,
            system_prompts={AGENT: persuader_prompt(self.exchanges), USER: persuadee_prompt(persona)},
            first_speaker=AGENT,
            data={"persona": persona},
            metadata={"split": task_id.split("-")[0]},
        )

    # ---- acts in, acts out ----------------------------------------------------------------------

    def allowed(self, side: str) -> np.ndarray:
        if self.to_speak != side:
            return np.zeros(len(ACTS[side]), np.int8)
        if side == AGENT:
            return np.ones(len(PERSUADER_ACTS), np.int8)
        return self.batch.user_features(np.array([0]))[1][0].astype(np.int8)

    def action_mask(self, side: str) -> np.ndarray:
        """The acts `side` may take now as a bool array, in the form libraries accept: all ones for
        the side that is not to speak (its action is ignored). `action_masks()` of the views."""
        if self.to_speak != side:
            return np.ones(len(ACTS[side]), bool)
        return self.allowed(side).astype(bool)

    def interpret_action(self, side: str, action: Any) -> str:
        """The act's canonical text, from an act index or any text that names an allowed act."""
        return act_text(ACTS[side], self._act(side, action))

    def on_turn(self, side: str, message: Message) -> None:
        act = parse_act(ACTS[side], message.text)
        assert act is not None, "interpret_action only lets acts through"
        step = self.batch.step_agent if side == AGENT else self.batch.step_user
        step(np.array([0]), np.array([act]))

    def _act(self, speaker: str, action: Any) -> int:
        """The act index; `InvalidAction` says why the action is not one."""
        acts = ACTS[speaker]
        if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
            action = int(action)  # a 0-d array, as vectorized RL code hands a Discrete action over
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            act: int | None = int(action) if 0 <= int(action) < len(acts) else None
        else:  # text, or a message as a policy returns it
            message = parse_action(action).message
            act = parse_act(acts, message.text) if message is not None and not message.tool_calls else None
        if act is None:
            raise InvalidAction(
                f"not a {speaker} act: give an index 0..{len(acts) - 1} or name one of: {', '.join(acts)}"
            )
        if not self.allowed(speaker)[act]:
            raise InvalidAction(
                f"'{acts[act]}' is not allowed now: donation decisions answer a proposition or an amount request"
            )
        return act

    def end_reason(self, side: str, message: Message) -> str | None:
        reason = str(self.batch.end_reason[0])
        return reason if reason and reason != "max_turns" else None

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        reward = float(self.batch.agent_reward()[0])
        donation = float(self.batch.donation[0])
        components = {"donation": donation, "success": float(donation > 0)}
        details = {"donation_stated": bool(self.batch.stated[0]), "exchanges": int(self.batch.exchange[0])}
        user_value = user_reward_from(reward, self.user_reward)
        return {
            AGENT: Reward(reward, components, details),
            USER: Reward(user_value, user_components(components, self.user_reward), details),
        }

    # ---- observations ---------------------------------------------------------------------------

    def observe(self, side: str) -> Any:
        if side == AGENT:
            features = self.batch.agent_features(np.array([0]))[0]
        else:
            features = self.batch.user_features(np.array([0]))[0][0]
        text = render_view(self.views[side]) if self.obs != "features" else None
        return assemble(features, text, self.action_mask(side) if self.mask_in_obs else None, self.obs)

    def side_info(self, side: str) -> dict[str, Any]:
        return {"action_mask": self.allowed(side)}

    # ---- lean infos -----------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        observations, infos = super().reset(seed=seed, options=options)
        return observations, self._lean(infos)

    def step(self, actions: Mapping[str, Any]) -> Transition:
        observations, rewards, terminations, truncations, infos = super().step(actions)
        return observations, rewards, terminations, truncations, self._lean(infos)

    def _lean(self, infos: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """With `info="lean"`: the same keys at every step, numbers only (TorchRL stacks them); the
        mask is in the observation or here, never in both."""
        if self.info_mode == "full":
            return infos
        lean = {side: {"speaking": np.int8(self.to_speak == side)} for side in infos}
        if not self.mask_in_obs:
            for side in infos:
                lean[side]["action_mask"] = self.action_mask(side).astype(np.int8)
        return lean


def parallel_env(**kwargs: Any) -> PersuasionActsEnv:
    """The PettingZoo parallel env (`possible_agents == ["agent", "user"]`)."""
    return PersuasionActsEnv(**kwargs)
