"""`DialogueEnv`: turn-based two-party dialogue as a PettingZoo `ParallelEnv`.

The env never calls a language model. It keeps one conversation, renders each side's own view
(its system prompt, its own turns as `assistant`, the other side's as `user`, its tool results as
`tool`) and consumes the reply of whichever side is to speak. A subclass supplies the scenario,
the tools, the end-of-conversation rules and the rewards through the hooks listed under "what a
subclass provides" (it never overrides `step` or a private method); everything else lives here:

* a tool call is executed by the subclass and answered to the same side, which keeps the turn;
  a malformed call, an unknown tool or arguments that break the tool's schema are answered with
  a tool error and counted against an error budget, never raised;
* `terminated` is the conversation ending by its own rules (`end_reason`); `truncated` is a
  limit: turns, error budget, tool calls in one turn, context budget, or a policy failure
  reported through `abort`;
* rewards are per side and terminal, with a per-component breakdown in `info[side]["reward_info"]`.

`chat_infos` holds each side's full info of the last `reset`/`step` (its view as OpenAI messages,
its tools, the reward breakdown at the end): what a chat policy playing that side reads, and what
every player of this library (views, batches, people) reads, even where a benchmark option returns
leaner infos to array-based libraries.
"""

from __future__ import annotations

import copy
import json
import warnings
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from scope_envs.core.actions import parse_action
from scope_envs.core.chat import Message, ToolCall, tool_name
from scope_envs.core.policy import PolicyError
from scope_envs.core.render import render_transcript, render_view
from scope_envs.core.spaces import UnicodeText, fit_to_space
from scope_envs.core.tools import ToolError, validate_arguments

AGENT = "agent"
USER = "user"
SIDES = (AGENT, USER)
KNOWN_OPTIONS = frozenset({"task_id", "split"})


Transition = tuple[dict[str, str], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]


def other_side(side: str) -> str:
    return USER if side == AGENT else AGENT


@dataclass
class Scenario:
    """Everything `reset` decides: who the two sides are and what they know.

    `opening` holds turns spoken before the first step (for example a fixed greeting), as
    `(side, text)` pairs; `data` holds what the subclass needs later (a task, personas);
    `metadata` is shown to both sides' callers as `info[side]["scenario"]` (split, data source).
    """

    scenario_id: str
    system_prompts: dict[str, str]
    tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    first_speaker: str = AGENT
    opening: Sequence[tuple[str, str]] = ()
    data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reward:
    """A side's terminal reward and the components it was computed from."""

    value: float
    components: Mapping[str, float] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_info(self) -> dict[str, Any]:
        return {"reward": float(self.value), "components": dict(self.components), **copy.deepcopy(dict(self.details))}


USER_REWARDS = ("adversarial", "cooperative")


def user_reward_from(agent_reward: Any, mode: str) -> Any:
    """The user's reward from the agent's (a number or an array): `1 - r` when the user is
    `"adversarial"`, `r` when `"cooperative"`."""
    return 1.0 - agent_reward if mode == "adversarial" else agent_reward


def user_components(components: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """The user's own reward components from the agent's: the same record of what happened, but
    `success` is the user's: the agent's failure for an `"adversarial"` user, its success for a
    `"cooperative"` one (so a persuadee that kept its money succeeded)."""
    own = dict(components)
    if "success" in own:
        own["success"] = user_reward_from(own["success"], mode)
    return own


class InvalidAction(ValueError):
    """Raised by `DialogueEnv.interpret_action` for an action the benchmark does not accept; the
    env answers it as an invalid action (counted against the error budget), never as a crash."""


@dataclass(frozen=True)
class ToolResult:
    """What `call_tool` may return instead of plain text: the output, and the reason the
    conversation ends by the benchmark's rules because of this call (e.g. a transfer to a human)."""

    output: str
    end_reason: str | None = None


@dataclass(frozen=True)
class EpisodeEnd:
    """Why an episode ended. `terminated` is False for every limit (a truncation); `side` is the
    side whose own actions broke a limit (the error budget), when one did."""

    reason: str
    terminated: bool
    detail: str = ""
    side: str | None = None


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A tokenizer-free estimate (about four characters a token) used for the context budget."""
    chars = 0
    for message in messages:
        chars += len(message.text) + 16
        for call in message.tool_calls:
            chars += len(call.name) + len(call.arguments)
    return chars // 4


class DialogueEnv(ParallelEnv[str, str, Any]):
    """Base class of every SCOPE environment. See the module docstring for the contract."""

    metadata: ClassVar[dict[str, Any]] = {
        "name": "dialogue_v0",
        "render_modes": ["ansi", "human"],
        "is_parallelizable": True,
    }
    # Import paths ("module:Class") of the rule-based policies that `"scripted"` builds, per side.
    scripted_policies: ClassVar[dict[str, str]] = {}
    # What this instance's data fell back to or left out (e.g. synthetic personas where a corpus was
    # not found), one line each, for whoever offers the env to people; a log line is said once per
    # process, so a server asks each env it builds.
    data_notes: Sequence[str] = ()

    def __init__(
        self,
        *,
        max_turns: int = 30,
        max_errors: int = 10,
        max_tool_calls_per_turn: int = 32,
        max_context_tokens: int | None = 128_000,
        count_tokens: Callable[[Sequence[Message]], int] = estimate_tokens,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.possible_agents = list(SIDES)
        self.agents: list[str] = []
        self.max_turns = max_turns
        self.max_errors = max_errors
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.max_context_tokens = max_context_tokens
        self.count_tokens = count_tokens
        self.render_mode = render_mode
        self.observation_spaces: dict[str, Any] = {side: UnicodeText() for side in SIDES}
        self.action_spaces: dict[str, Any] = {side: UnicodeText() for side in SIDES}
        self._np_random: np.random.Generator | None = None
        self._np_random_seed: int | None = None
        self.scenario: Scenario | None = None
        self.to_speak: str | None = None
        self.end: EpisodeEnd | None = None
        self.chat_infos: dict[str, dict[str, Any]] = {}

    # ---- what a subclass provides ------------------------------------------------------------
    # Required: `load_scenario` and `compute_rewards`. Optional: tools (`call_tool`), actions in
    # another form than text (`interpret_action`), the benchmark's own state (`on_turn`), ending
    # rules (`end_reason`, a `ToolResult` from a tool, `limit_reached`), observations (`observe`,
    # `side_info`) and spaces (`observation_spaces` / `action_spaces`, set in `__init__`).

    @abstractmethod
    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        """Chooses the scenario from `options` (`task_id`, `split`) or else by `rng`."""

    def interpret_action(self, side: str, action: Any) -> Any:
        """The action as the conversation records it (text, a `Message`, a tool call), from whatever
        the side's action space allows (e.g. an act index); raise `InvalidAction` to reject it."""
        return action

    def call_tool(self, side: str, call: ToolCall) -> str | ToolResult:
        """Executes a validated call of one of `side`'s tools: its output, or a `ToolResult` when
        the call also ends the conversation; raise `ToolError` for a tool-level error."""
        raise ToolError(f"'{call.name}' has no implementation in {type(self).__name__}")

    def on_turn(self, side: str, message: Message) -> None:
        """After a text turn joined the conversation, before `end_reason`: update the benchmark's
        own state from it."""

    def end_reason(self, side: str, message: Message) -> str | None:
        """After a text turn: the reason the conversation ends by its own rules, or None."""
        return None

    def limit_reached(self) -> EpisodeEnd | None:
        """A limit of the benchmark's own (e.g. wall time), checked after the built-in ones at
        each step: the truncation it causes, or None."""
        return None

    @abstractmethod
    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        """Each side's terminal reward, computed once when the episode ends (terminated or truncated)."""

    def worst_reward(self, side: str) -> float:
        """The lowest reward `side` can get in this benchmark. A side that exhausts its error budget
        gets it, whatever `compute_rewards` says: no side can gain by breaking the protocol."""
        return 0.0

    def observe(self, side: str) -> Any:
        """`side`'s observation: by default its view rendered as text."""
        return render_view(self.views[side])

    def side_info(self, side: str) -> dict[str, Any]:
        """Entries the benchmark adds to `side`'s info at every step (e.g. an action mask)."""
        return {}

    # ---- PettingZoo API ------------------------------------------------------------------------

    def observation_space(self, agent: str) -> Any:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self.action_spaces[agent]

    @property
    def np_random(self) -> np.random.Generator:
        if self._np_random is None:
            self._np_random, self._np_random_seed = seeding.np_random()
        return self._np_random

    def pick_scenario(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Scenario:
        """The scenario `reset(seed, options)` starts, drawn the same way, without starting it (no
        views, observations or infos): what a rollout that plays many episodes of it needs."""
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
        options = self._checked_options(options)
        try:
            return self.load_scenario(self.np_random, options)
        except (KeyError, IndexError) as error:  # a lookup of what the options named
            raise ValueError(
                f"{type(self).__name__}.reset: no scenario for options {options!r} ({type(error).__name__}: {error})"
            ) from error

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        scenario = self.pick_scenario(seed, options)
        self.scenario = scenario
        self.agents = list(SIDES)
        self.views = {side: [Message("system", scenario.system_prompts.get(side, ""))] for side in SIDES}
        self.log: list[tuple[str, Message]] = []  # every message in order, for render()
        self.turns = 0
        self.errors = 0  # both sides' invalid actions and failed tool calls
        self.side_errors = dict.fromkeys(SIDES, 0)
        self.tool_calls_this_turn = 0
        self.end = None
        self.to_speak = scenario.first_speaker
        for side, text in scenario.opening:
            self._speak(side, Message("assistant", text))
        self.chat_infos = {side: self._info(side) for side in SIDES}
        return {side: self._observation(side) for side in SIDES}, self.chat_infos

    extra_options: ClassVar[tuple[str, ...]] = ()

    def _checked_options(self, options: Any) -> dict[str, Any]:
        name = type(self).__name__
        if options is None:
            return {}
        if not isinstance(options, Mapping):
            raise TypeError(
                f"{name}.reset(options=...) takes a dict such as {{'task_id': ..., 'split': 'train'}} or None, "
                f"got {type(options).__name__}"
            )
        options = dict(options)
        if isinstance(options.get("task_id"), int) and not isinstance(options["task_id"], bool):
            options["task_id"] = str(options["task_id"])  # benchmarks with numbered tasks
        for key in ("task_id", "split"):
            if options.get(key) is not None and not isinstance(options[key], str):
                raise TypeError(f"{name}.reset: options[{key!r}] must be a string, got {options[key]!r}")
        unknown = set(options) - KNOWN_OPTIONS - set(self.extra_options)
        if unknown:
            warnings.warn(f"{name}.reset ignores unknown options {sorted(map(str, unknown))}", stacklevel=3)
        return options

    def step(self, actions: Mapping[str, Any]) -> Transition:
        """Consumes the action of the side to speak; the other side's action is ignored."""
        if self.end is not None or self.scenario is None:
            raise RuntimeError("the episode is over (or never started): call reset() before step()")
        speaker = self.to_speak
        assert speaker is not None
        if not isinstance(actions, Mapping):
            raise TypeError(
                f"step(actions) takes a dict mapping each side to its action, e.g. {{{speaker!r}: ...}}; "
                f"got {type(actions).__name__}"
            )
        if speaker not in actions:
            raise ValueError(
                f"it is {speaker!r}'s turn but actions has no entry for it (got keys {sorted(map(repr, actions))}); "
                f"pass {{{speaker!r}: action}}"
            )
        event = self._consume(speaker, actions[speaker])
        if self.end is None:
            self._check_limits()
        return self._transition({speaker: event})

    def take_turn(self, side: str, reply: Any) -> Transition:
        """Applies what `side`'s policy produced: its reply is the side's action; a `PolicyError`
        (the policy could not reply) ends the episode as a truncation, `policy_error` (or the
        error's own `end_reason`, such as `max_model_len`)."""
        if isinstance(reply, PolicyError):
            return self.abort(reply.end_reason, str(reply))
        return self.step({side: reply})

    def abort(self, reason: str, detail: str = "") -> Transition:
        """Ends the running episode as a truncation, e.g. when a policy could not produce a reply."""
        if self.end is not None or self.scenario is None:
            raise RuntimeError("the episode is over (or never started): nothing to abort")
        self.end = EpisodeEnd(reason, terminated=False, detail=detail)
        return self._transition({})

    def render(self) -> str | None:
        text = render_transcript(self.log) if self.scenario is not None else ""
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass

    # ---- conversation ---------------------------------------------------------------------------

    def view(self, side: str) -> list[Message]:
        """`side`'s own view of the conversation (a copy)."""
        return list(self.views[side])

    def tools(self, side: str) -> list[dict[str, Any]]:
        assert self.scenario is not None
        return self.scenario.tools.get(side, [])

    def _consume(self, speaker: str, action: Any) -> dict[str, Any]:
        try:
            action = self.interpret_action(speaker, action)
        except InvalidAction as error:
            self._count_error(speaker)
            return {"event": "invalid_action", "error": str(error)}
        parsed = parse_action(action)
        event: dict[str, Any] = {"warnings": list(parsed.warnings)} if parsed.warnings else {}
        if parsed.message is None:
            self._count_error(speaker)
            return {**event, "event": "invalid_action", "error": parsed.invalid}
        message = parsed.message
        if not message.tool_calls:
            self._speak(speaker, message)
            self.on_turn(speaker, message)
            reason = self.end_reason(speaker, message)
            if reason is not None:
                self.end = EpisodeEnd(reason, terminated=True)
            return {**event, "event": "message"}
        calls = tuple(
            call if call.id else ToolCall(call.name, call.arguments, id=f"call_{len(self.log)}_{index}")
            for index, call in enumerate(message.tool_calls)
        )
        message = Message("assistant", message.content, tool_calls=calls, extra=message.extra)
        self.views[speaker].append(message)
        self.log.append((speaker, message))
        results = []
        for index, call in enumerate(calls):
            error = parsed.call_errors.get(index) or self._check_call(speaker, call)
            if error is None:
                output, error, ends = self._execute(speaker, call)
                if ends is not None and self.end is None:
                    self.end = EpisodeEnd(ends, terminated=True)
            else:
                output = f"Error: {error}"
            if error is not None:
                self._count_error(speaker)
            reply = Message("tool", output, tool_call_id=call.id, name=call.name)
            self.views[speaker].append(reply)
            self.log.append((speaker, reply))
            results.append({"name": call.name, "id": call.id, "error": error})
        self.tool_calls_this_turn += len(calls)
        return {**event, "event": "tool_calls", "tool_results": results}

    def _check_call(self, side: str, call: ToolCall) -> str | None:
        schemas = {tool_name(schema): schema for schema in self.tools(side)}
        if call.name not in schemas:
            available = ", ".join(sorted(schemas)) or "none"
            return f"unknown tool '{call.name}'. Available tools: {available}."
        return validate_arguments(schemas[call.name], call.args)

    def _execute(self, side: str, call: ToolCall) -> tuple[str, str | None, str | None]:
        """The call's output, its error (or None) and the end reason it causes (or None)."""
        try:
            output = self.call_tool(side, call)
        except ToolError as error:
            return f"Error: {error}", str(error), None
        except Exception as error:  # a failing tool is the episode's problem, not the caller's crash
            message = f"tool '{call.name}' failed: {type(error).__name__}: {error}"
            return f"Error: {message}", message, None
        ends = None
        if isinstance(output, ToolResult):
            output, ends = output.output, output.end_reason
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
        return text, None, ends

    def _speak(self, speaker: str, message: Message) -> None:
        """A text turn: the speaker's own view gets it as assistant, the other side's as user."""
        self.views[speaker].append(message)
        self.views[other_side(speaker)].append(Message("user", message.text))
        self.log.append((speaker, message))
        self.turns += 1
        self.tool_calls_this_turn = 0
        self.to_speak = other_side(speaker)

    def _count_error(self, side: str) -> None:
        self.errors += 1
        self.side_errors[side] += 1

    def _check_limits(self) -> None:
        over = [side for side in SIDES if self.side_errors[side] > self.max_errors]
        if over:
            detail = f"{over[0]} made {self.side_errors[over[0]]} errors > {self.max_errors}"
            self.end = EpisodeEnd("error_budget", terminated=False, detail=detail, side=over[0])
        elif self.tool_calls_this_turn > self.max_tool_calls_per_turn:
            self.end = EpisodeEnd(
                "tool_call_budget", terminated=False, detail=f"{self.tool_calls_this_turn} tool calls in one turn"
            )
        elif self.max_context_tokens is not None and any(
            self.count_tokens(self.views[side]) > self.max_context_tokens for side in SIDES
        ):
            self.end = EpisodeEnd(
                "context_budget", terminated=False, detail=f"a view exceeds {self.max_context_tokens} tokens"
            )
        elif self.turns >= self.max_turns:
            self.end = EpisodeEnd("max_turns", terminated=False, detail=f"{self.turns} turns")
        else:
            self.end = self.limit_reached()

    def _transition(self, events: dict[str, dict[str, Any]]) -> Transition:
        rewards = dict.fromkeys(SIDES, 0.0)
        done = self.end is not None
        reward_info: dict[str, Reward] = {}
        if done:
            assert self.end is not None
            reward_info = self.compute_rewards(self.end)
            if self.end.reason == "error_budget" and self.end.side is not None:
                reward_info[self.end.side] = self._penalty(self.end.side, reward_info[self.end.side])
            rewards = {side: float(reward_info[side].value) for side in SIDES}
            self.to_speak = None
            self.agents = []
        observations = {side: self._observation(side) for side in SIDES}
        infos = {side: self._info(side) for side in SIDES}
        for side, event in events.items():
            infos[side].update(copy.deepcopy(event))
        if done:
            assert self.end is not None
            for side in SIDES:
                infos[side]["end_reason"] = self.end.reason
                if self.end.detail:
                    infos[side]["end_detail"] = self.end.detail
                infos[side]["reward_info"] = reward_info[side].to_info()
        terminated = dict.fromkeys(SIDES, done and self.end.terminated)  # type: ignore[union-attr]
        truncated = dict.fromkeys(SIDES, done and not self.end.terminated)  # type: ignore[union-attr]
        if self.render_mode == "human":
            self.render()
        self.chat_infos = infos
        return observations, rewards, terminated, truncated, infos

    def _penalty(self, side: str, earned: Reward) -> Reward:
        details = {**earned.details, "penalty": "exhausted its error budget", "reward_before_penalty": earned.value}
        return Reward(self.worst_reward(side), earned.components, details)

    def _observation(self, side: str) -> Any:
        """What `observe` renders, kept inside the declared space (over-long text is cut)."""
        return fit_to_space(self.observation_space(side), self.observe(side))

    def _info(self, side: str) -> dict[str, Any]:
        assert self.scenario is not None
        return {
            "to_speak": self.to_speak,
            "messages": [message.to_openai() for message in self.views[side]],
            "tools": copy.deepcopy(self.tools(side)),
            "scenario_id": self.scenario.scenario_id,
            "scenario": copy.deepcopy(self.scenario.metadata),
            "turn": self.turns,
            "errors": self.errors,
            **self.side_info(side),
        }
