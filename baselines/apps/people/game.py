"""One person's episode: a person plays one side of any registered environment, a policy the other.

`HumanGame` drives a `DialogueEnv` turn by turn: `start` resets it and lets the opponent speak
until it is the person's turn; `say(text)` and `call_tool(name, arguments)` are the person's
turn (a tool call is validated against the side's OpenAI tool schema first, so a mistyped
argument is reported and nothing is sent); after each of them the opponent speaks again.
`state()` is what a front end shows: the person's own view, their tools, whose turn it is, and at
the end the end reason and the reward breakdown (`info["reward_info"]`). `record()` is the
episode as an `EpisodeRecord`. An opponent that raises ends the episode (`end_reason`
`"opponent_error"`) instead of leaving it waiting for a reply that never comes. Opponent replies
are seeded with `derive_seed(seed, position)`, as in the Gymnasium views, so a scripted opponent
replays a game exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from baselines.training.episodes import ReplyRecorder, view_key
from baselines.training.records import EpisodeRecord, log_entries
from scope_envs.core.batch import play_turn
from scope_envs.core.chat import Message, ToolCall, tool_name
from scope_envs.core.dialogue import SIDES, DialogueEnv, other_side
from scope_envs.core.registration import find_env
from scope_envs.core.seeding import derive_seed
from scope_envs.core.specs import resolve_policy
from scope_envs.core.tools import validate_arguments

HUMAN = "human"
OPPONENT_ERROR = "opponent_error"  # the end reason of an episode whose opponent failed
LOG = logging.getLogger(__name__)


class InvalidMove(ValueError):
    """A person's turn that is refused before it reaches the env (nothing changes)."""


def build_opponent(spec: str, env: DialogueEnv, side: str) -> Any:
    """A policy from a spec of the one grammar (`scope_envs.core.specs`: `vs:SPEC` is Verbalized
    Sampling around SPEC's policy, as everywhere)."""
    return resolve_policy(spec, env=env, side=side)


@dataclass(frozen=True)
class GameSettings:
    env: str
    human: str  # the side the person plays
    opponent: str = "scripted"
    seed: int = 0
    task_id: str | None = None
    split: str | None = None
    env_kwargs: Mapping[str, Any] | None = None
    label: str | None = None  # what a front end calls the opponent (default: its spec)


class HumanGame:
    """See the module docstring."""

    def __init__(self, settings: GameSettings, *, opponent: Any = None) -> None:
        if settings.human not in SIDES:
            raise ValueError(f"--human must be one of {', '.join(SIDES)}, got {settings.human!r}")
        self.settings = settings
        self.info = find_env(settings.env)
        self.env: DialogueEnv = self.info.make(**dict(settings.env_kwargs or {}))
        self.side = settings.human
        self.opponent_side = other_side(self.side)
        policy = opponent or build_opponent(settings.opponent, self.env, self.opponent_side)
        self.opponent = ReplyRecorder(policy)
        self.infos: dict[str, dict[str, Any]] = {}
        self.rewards: dict[str, float] = dict.fromkeys(SIDES, 0.0)
        self.last_error: str | None = None
        self.failure: str | None = None  # the opponent failed: the episode ends here
        self._vs_by_position: dict[int, dict[str, Any]] = {}

    def start(self) -> dict[str, Any]:
        return self.replay([])

    def close(self) -> None:
        """Releases the env (a sandbox, a process); the opponent may serve other games."""
        self.env.close()

    def replay(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Starts the episode and re-applies stored log entries (`EpisodeRecord.log`): each side's
        own messages are stepped again, tool results and opening turns come from the env itself.
        Then the opponent speaks if it is its turn. A study resumes an episode this way."""
        options = {k: v for k, v in (("task_id", self.settings.task_id), ("split", self.settings.split)) if v}
        self.env.reset(seed=self.settings.seed, options=options)
        self.infos = self.env.chat_infos
        self._vs_by_position, self.failure = {}, None
        for position, entry in enumerate(entries):
            if position < len(self.env.log):
                continue  # an opening turn or a tool result: the env adds it again
            message = entry["message"]
            if message.get("role") != "assistant" or self.over:
                raise ValueError(f"stored turn {position} does not fit the replayed episode")
            side = entry["side"]
            self._take(self.env.step({side: Message.from_openai(message), other_side(side): ""}))
            if "vs" in entry:
                self._vs_by_position[position] = entry["vs"]
        self._let_opponent_speak()
        return self.state()

    @property
    def over(self) -> bool:
        return self.env.end is not None or self.failure is not None

    def tools(self) -> list[dict[str, Any]]:
        return self.infos[self.side]["tools"] if self.infos else []

    def say(self, text: str) -> dict[str, Any]:
        if not text.strip():
            raise InvalidMove("say something (an empty turn is not sent)")
        return self._act(text)

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        schemas = {tool_name(schema): schema for schema in self.tools()}
        if name not in schemas:
            raise InvalidMove(f"unknown tool {name!r}; your tools: {', '.join(sorted(schemas)) or 'none'}")
        error = validate_arguments(schemas[name], arguments)
        if error is not None:
            raise InvalidMove(f"{name}: {error}")
        return self._act(Message("assistant", None, tool_calls=(ToolCall.create(name, arguments),)))

    def _act(self, action: Any) -> dict[str, Any]:
        if self.over:
            raise InvalidMove("the episode is over")
        if self.env.to_speak != self.side:
            raise InvalidMove(f"it is the {self.env.to_speak}'s turn")
        transition = self.env.step({self.side: action, self.opponent_side: ""})
        self._take(transition)
        self.last_error = self.infos[self.side].get("error")
        self._let_opponent_speak()
        return self.state()

    def _take(self, transition: Any) -> None:
        self.infos = self.env.chat_infos
        self.rewards = {side: float(value) for side, value in transition[1].items()}

    def _let_opponent_speak(self) -> None:
        while not self.over and self.env.to_speak == self.opponent_side:
            position = len(self.env.log)
            before = len(self.opponent.candidates)
            seed = derive_seed(self.settings.seed, position)
            info = self.infos[self.opponent_side]
            try:
                self._take(play_turn(self.env, self.opponent_side, self.opponent, seed))
            except Exception:  # an API outage, a crashed model: the episode ends, the server does not
                LOG.exception("the opponent %s failed; the episode ends", self.settings.opponent)
                self.failure = OPPONENT_ERROR
                return
            if len(self.opponent.candidates) > before:
                self._vs_by_position[position] = self.opponent.candidates[view_key(info["messages"])]

    def state(self) -> dict[str, Any]:
        """What a front end shows the person (their own side only: never the other side's prompt)."""
        info = self.infos[self.side]
        state: dict[str, Any] = {
            "env": self.settings.env,
            "side": self.side,
            "opponent": self.settings.label or self.settings.opponent,
            "scenario_id": info["scenario_id"],
            "messages": info["messages"],
            "log": log_entries(self.env.log, self._vs_by_position),
            "tools": info["tools"],
            "your_turn": not self.over and self.env.to_speak == self.side,
            "over": self.over,
            "error": self.last_error,
        }
        if self.failure is not None:
            state["end_reason"] = self.failure
            state["end_detail"] = "your partner could not reply, so this conversation ends here"
            state["rewards"] = self.rewards
            state["reward_info"] = {}
        elif self.over:
            state["end_reason"] = info.get("end_reason")
            state["end_detail"] = info.get("end_detail", "")
            state["rewards"] = self.rewards
            state["reward_info"] = {side: self.infos[side].get("reward_info", {}) for side in SIDES}
        return state

    def record(self, *, source: str = "play", extra: Mapping[str, Any] | None = None) -> EpisodeRecord:
        players = {self.side: HUMAN, self.opponent_side: self.settings.opponent}
        return EpisodeRecord(
            env=self.settings.env,
            scenario_id=self.infos[self.side]["scenario_id"],
            seed=self.settings.seed,
            players=players,
            log=log_entries(self.env.log, self._vs_by_position),
            messages={side: self.infos[side]["messages"] for side in SIDES},
            rewards=self.rewards,
            reward_info={side: self.infos[side].get("reward_info", {}) for side in SIDES},
            end_reason=self.failure or (self.env.end.reason if self.env.end else "unfinished"),
            turns=self.env.turns,
            simulator=self.settings.opponent,
            source=source,
            extra=dict(extra or {}),
        )
