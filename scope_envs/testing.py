"""`check_env`: the conformance check every SCOPE environment's tests call.

It runs PettingZoo's `parallel_api_test` and Gymnasium's `check_env` on both single-agent views,
and adds what neither checks for a dialogue: one speaker at a time, tool calls keeping the turn,
valid OpenAI-format views, terminal per-side rewards with their breakdown, `terminated` and
`truncated` never both set, bad actions never raising, and whole-episode reproducibility.

Two upstream checks are replaced rather than run:
* PettingZoo's AEC `api_test` assumes array observations and fails on text ones, so the AEC
  conversion of a dialogue env is not run through it; the parallel test covers the same API.
* PettingZoo's `parallel_seed_test` stops after one step (it tests `any()` of a dict, which is
  true as soon as the dict has keys), so `check_seeded_episodes` compares whole episodes.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import parallel_api_test

from scope_envs.core.chat import Message, tool_name
from scope_envs.core.dialogue import AGENT, SIDES, USER, DialogueEnv, Transition
from scope_envs.core.views import AgentView, DialogueView, UserView

EnvFactory = Callable[[], DialogueEnv]

BAD_ACTIONS: tuple[Any, ...] = (
    '{"name": "lookup", "arguments": {',  # invalid JSON in a tool call
    '{"name": "no_such_tool_anywhere", "arguments": {}}',  # unknown tool
    '[{"name": 3}]',  # a call without a usable name
    "x" * 1_000_000,  # a 1 MB message
    "broken \udcff surrogate",  # not encodable as UTF-8
    b"\xff\xfe not utf-8",
    None,
    12345,
    {"unexpected": "dict"},
    "",
)


def check_env(
    env_fn: EnvFactory | DialogueEnv, *, simulator: Any = None, agent: Any = None, episodes: int = 4, seed: int = 0
) -> None:
    """Raises `AssertionError` (or the error PettingZoo/Gymnasium raise) at the first violation.

    `simulator` and `agent` play the partner in the user and agent views; by default the env's
    scripted policies, or seeded random text where an env has none.
    """
    factory = _as_factory(env_fn)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ignores unknown options")  # the test passes {"options": 1}
        parallel_api_test(factory(), num_cycles=200)
    check_seeded_episodes(factory, seed=seed)
    check_dialogue_contract(factory(), episodes=episodes, seed=seed)
    check_bad_actions(factory(), seed=seed)
    for view_cls, partner in ((AgentView, simulator), (UserView, agent)):
        check_view(factory, view_cls, partner, episodes=episodes, seed=seed)


def _as_factory(env_fn: EnvFactory | DialogueEnv) -> EnvFactory:
    if isinstance(env_fn, DialogueEnv):
        prototype = env_fn
        return lambda: copy.deepcopy(prototype)
    return env_fn


def random_action(env: DialogueEnv, side: str, rng: np.random.Generator) -> Any:
    """Text most of the time; otherwise a tool call (valid name, arbitrary arguments) or a broken one."""
    tools = env.tools(side)
    roll = rng.random()
    if tools and roll < 0.3:
        name = tool_name(tools[int(rng.integers(len(tools)))])
        return json.dumps({"name": name, "arguments": {"id": str(rng.integers(100))}})
    if roll < 0.35:
        return BAD_ACTIONS[int(rng.integers(len(BAD_ACTIONS)))]
    return env.action_space(side).sample()


def play_random_episode(env: DialogueEnv, seed: int, max_steps: int = 500) -> list[tuple]:
    """Plays one episode with `random_action`, checking the contract at every step; returns the steps."""
    rng = np.random.default_rng(seed)
    for side in SIDES:
        env.action_space(side).seed(seed)
    observations, _ = env.reset(seed=seed)
    infos = env.chat_infos  # the full infos, whatever the env's info option returns
    _check_live(env, observations, infos)
    steps: list[tuple] = [(observations, infos)]
    for _ in range(max_steps):
        speaker = infos[AGENT]["to_speak"]
        before = {side: len(infos[side]["messages"]) for side in SIDES}
        action = random_action(env, speaker, rng)
        transition = (*env.step({side: (action if side == speaker else "") for side in SIDES})[:4], env.chat_infos)
        observations, _, _, _, infos = transition
        steps.append(transition)
        _check_transition(env, speaker, before, transition)
        if not env.agents:
            return steps
        _check_live(env, observations, infos)
    raise AssertionError(f"episode did not end within {max_steps} steps: limits are not enforced")


def _check_live(env: DialogueEnv, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> None:
    speakers = {infos[side]["to_speak"] for side in SIDES}
    assert len(speakers) == 1 and speakers <= set(SIDES), f"exactly one side must be to speak, infos say {speakers}"
    for side in SIDES:
        assert env.observation_space(side).contains(observations[side]), f"{side}'s observation is outside its space"
        _check_view(infos[side]["messages"], infos[side]["tools"])


def _check_view(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
    parsed = [Message.from_openai(m) for m in messages]
    assert parsed and parsed[0].role == "system", "a view starts with the side's system prompt"
    assert all(m.to_openai() == d for m, d in zip(parsed, messages, strict=True)), (
        "views must be canonical OpenAI dicts"
    )
    open_calls: list[str] = []
    for message in parsed[1:]:
        if message.role == "tool":
            assert message.tool_call_id in open_calls, f"tool result {message.tool_call_id!r} answers no open call"
            open_calls.remove(message.tool_call_id)
            continue
        assert not open_calls, f"tool calls {open_calls} were never answered"
        assert message.role in {"user", "assistant"}, f"unexpected role {message.role!r} in a view"
        open_calls = [call.id for call in message.tool_calls]
        assert all(open_calls), "every recorded tool call has an id"
    assert not open_calls, f"tool calls {open_calls} were never answered"
    for schema in tools:
        assert schema.get("type") == "function" and tool_name(schema), "tools are OpenAI function schemas"


def _check_transition(env: DialogueEnv, speaker: str, before: dict[str, int], transition: Transition) -> None:
    _, rewards, terminated, truncated, infos = transition
    for name, value in (("rewards", rewards), ("terminated", terminated), ("truncated", truncated), ("infos", infos)):
        assert set(value) == set(SIDES), f"{name} must cover both sides"
    done = not env.agents
    for side in SIDES:
        assert not (terminated[side] and truncated[side]), "terminated and truncated are never both set"
        assert terminated[side] == terminated[AGENT] and truncated[side] == truncated[AGENT], "both sides end together"
        assert (terminated[side] or truncated[side]) == done, "agents empty exactly when the episode ends"
        if not done:
            assert rewards[side] == 0.0, "rewards are terminal"
            assert "reward_info" not in infos[side]
        else:
            breakdown = infos[side]["reward_info"]
            assert breakdown["reward"] == rewards[side], "reward_info['reward'] equals the reward"
            assert isinstance(breakdown["components"], dict)
            assert isinstance(infos[side]["end_reason"], str) and infos[side]["end_reason"]
            assert infos[side]["to_speak"] is None
            _check_view(infos[side]["messages"], infos[side]["tools"])
    event = infos[speaker].get("event")
    listener = USER if speaker == AGENT else AGENT
    if event == "message":
        assert len(infos[listener]["messages"]) == before[listener] + 1, "a text turn reaches the other side"
        assert infos[listener]["messages"][-1]["role"] == "user"
        if not done:
            assert infos[speaker]["to_speak"] == listener, "a text turn passes the turn"
    elif event == "tool_calls":
        assert len(infos[listener]["messages"]) == before[listener], "tool traffic stays private"
        new = infos[speaker]["messages"][before[speaker] :]
        assert new[0]["role"] == "assistant" and new[0].get("tool_calls"), "the call is recorded"
        assert all(m["role"] == "tool" for m in new[1:]) and len(new) == 1 + len(new[0]["tool_calls"]), (
            "each call is answered"
        )
        if not done:
            assert infos[speaker]["to_speak"] == speaker, "a tool call keeps the turn"
    elif event == "invalid_action":
        assert isinstance(infos[speaker].get("error"), str), "an invalid action is explained"
        assert all(len(infos[s]["messages"]) == before[s] for s in SIDES), "an invalid action is not recorded"
    else:
        raise AssertionError(f"step must report the speaker's event, got {event!r}")


def check_dialogue_contract(env: DialogueEnv, *, episodes: int = 4, seed: int = 0) -> None:
    for episode in range(episodes):
        play_random_episode(env, seed + episode)


def check_seeded_episodes(factory: EnvFactory, *, seed: int = 0, episodes: int = 3) -> None:
    """Two instances, the same seeds and actions: every step of several whole episodes is equal,
    including the episodes that follow a seeded one through unseeded resets."""
    env_1, env_2 = factory(), factory()
    for side in SIDES:
        env_1.action_space(side).seed(seed)
        env_2.action_space(side).seed(seed)
    for episode in range(episodes):
        episode_seed = seed if episode == 0 else None
        rng_1, rng_2 = np.random.default_rng(seed + episode), np.random.default_rng(seed + episode)
        first_1, first_2 = env_1.reset(seed=episode_seed), env_2.reset(seed=episode_seed)
        assert data_equivalence(first_1, first_2), f"reset differs in episode {episode}"
        for _ in range(500):
            speaker = env_1.to_speak
            assert speaker == env_2.to_speak
            step_1 = env_1.step({speaker: random_action(env_1, speaker, rng_1)})
            step_2 = env_2.step({speaker: random_action(env_2, speaker, rng_2)})
            assert data_equivalence(step_1, step_2), f"episode {episode} diverged at turn {env_1.turns}"
            if not env_1.agents:
                break
        assert not env_2.agents


def check_bad_actions(env: DialogueEnv, *, seed: int = 0) -> None:
    """Every entry of `BAD_ACTIONS`, from either side, is answered without an exception."""
    for bad in BAD_ACTIONS:
        env.reset(seed=seed)
        first = env.to_speak
        assert first is not None
        env.step({first: bad})
        if env.agents and env.to_speak == first:
            env.step({first: "ok"})  # pass the turn so that the other side sends the bad action too
        if env.agents:
            env.step({env.to_speak: bad})


def _default_partner(env: DialogueEnv, side: str, partner: Any) -> Any:
    if partner is not None:
        return partner
    if side in env.scripted_policies:
        return "scripted"
    return RandomTextPolicy()


class RandomTextPolicy:
    """Seeded random utterances: the partner for envs without a scripted policy for a side."""

    deterministic = True

    def respond(self, messages: Any, tools: Any = None, *, seed: int | None = None) -> str:
        from scope_envs.core.spaces import UnicodeText

        return UnicodeText(seed=seed).sample()


def check_view(
    factory: EnvFactory, view_cls: type[DialogueView], partner: Any = None, *, episodes: int = 4, seed: int = 0
) -> None:
    """Gymnasium's `check_env` on the view, then whole episodes through it."""
    probe = factory()
    partner = _default_partner(probe, USER if view_cls is AgentView else AGENT, partner)

    def entry_point(render_mode: str | None = None) -> DialogueView:
        return view_cls(factory(), partner, render_mode=render_mode)

    spec = EnvSpec(
        id=f"scope-check/{type(probe).__name__}{view_cls.__name__}-v0", entry_point=entry_point, nondeterministic=True
    )
    env = gym.make(spec)
    gym_check_env(env.unwrapped, skip_render_check=False)
    view = env.unwrapped
    assert isinstance(view, DialogueView)
    for episode in range(episodes):
        view.action_space.seed(seed + episode)
        view.reset(seed=seed + episode)
        info = view.dialogue.chat_infos[view.side]  # the full info, whatever the env's info option
        total, done, steps = 0.0, False, 0
        while not done:
            assert info.get("to_speak") in {view.side, None}
            _, reward, terminated, truncated, _ = view.step(view.action_space.sample())
            info = view.dialogue.chat_infos[view.side]
            assert not (terminated and truncated)
            total += reward
            done = terminated or truncated
            steps += 1
            assert steps < 1000, "a view episode did not end"
        assert total == info["reward_info"]["reward"], "the view's return is the side's terminal reward"
    env.close()
