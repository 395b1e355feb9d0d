"""`ActsBatch`: many act-level persuasion episodes stepped together as arrays.

This is the testbed's single source of dynamics: the PettingZoo env is a batch of one with text
around it, and the trainer's rollouts step thousands of episodes at once. An exchange is the
persuader's act and, unless it closed the conversation, the persuadee's reply. An episode ends
(terminated) when the persuadee states an amount or the persuader closes, and is truncated after
`exchanges` exchanges. The persuader's reward is the stated amount / $2, as in the text env.
Version 1's `Rules` (and version 2's, the mechanism testbed's) add what the corpus shows a refusal
does: a refused request ends the episode, and a persuadee answers at most `max_requests` requests
(one more ends it); both versions' persuadees reply on `USER_FEATURES_V1`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scope_envs.persuasion_acts.acts import AMOUNTS, CLOSING, DISAGREE, FIRST_AMOUNT, IS_REQUEST
from scope_envs.persuasion_acts.model import (
    AGENT_FEATURES,
    HORIZON,
    N_PERSUADEE,
    N_PERSUADER,
    count_reactions,
    mood,
    reply_mask,
    user_features,
)
from scope_envs.persuasion_acts.population import user_features_v1

MAX_DONATION = 2.0


@dataclass(frozen=True)
class Rules:
    """The testbed version's dynamics: its persuadee features and what ends an episode."""

    version: int = 0
    refusal_ends: bool = False
    max_requests: int | None = None


V0 = Rules()


class ActsBatch:
    """`personas`: `[N, N_PERSONA]`. Call `step_agent` and `step_user` alternately on live episodes."""

    def __init__(self, personas: np.ndarray, exchanges: int = HORIZON, rules: Rules = V0) -> None:
        if exchanges < 1:
            raise ValueError("exchanges must be at least 1")
        self.personas = np.asarray(personas, float)
        self.exchanges = exchanges
        self.rules = rules
        n = len(self.personas)
        self.exchange = np.zeros(n, int)  # completed persuader acts
        self.used = np.zeros((n, N_PERSUADER), int)
        self.requests = np.zeros(n, int)
        self.last_agent = np.full(n, -1)
        self.last_user = np.full(n, -1)
        self.positive = np.zeros(n, int)
        self.negative = np.zeros(n, int)
        self.donation = np.zeros(n)
        self.stated = np.zeros(n, bool)
        self.live = np.ones(n, bool)
        self.end_reason = np.full(n, "", dtype=object)
        self.awaiting_user = np.zeros(n, bool)  # the persuader acted; the persuadee has not replied

    def __len__(self) -> int:
        return len(self.personas)

    def restart(self, index: np.ndarray, personas: np.ndarray) -> None:
        """Starts new episodes in rows `index`, with these personas (a vector env's reset of finished rows)."""
        fresh = ActsBatch(personas, self.exchanges, self.rules)
        for name, column in vars(fresh).items():
            if isinstance(column, np.ndarray):
                getattr(self, name)[index] = column

    # ---- what each side sees -------------------------------------------------------------------

    def agent_features(self, index: np.ndarray | None = None) -> np.ndarray:
        rows = np.arange(len(self)) if index is None else np.asarray(index)
        out = np.zeros((len(rows), len(AGENT_FEATURES)))
        out[:, 0] = 1.0
        heard = 1 + np.where(self.last_user[rows] < 0, N_PERSUADEE, self.last_user[rows])
        said = 1 + N_PERSUADEE + 1 + np.where(self.last_agent[rows] < 0, N_PERSUADER, self.last_agent[rows])
        out[np.arange(len(rows)), heard] = 1.0
        out[np.arange(len(rows)), said] = 1.0
        used = 1 + N_PERSUADEE + 1 + N_PERSUADER + 1
        out[:, used : used + N_PERSUADER] = np.minimum(self.used[rows], HORIZON) / HORIZON
        out[:, used + N_PERSUADER] = mood(self.positive[rows], self.negative[rows])
        out[:, used + N_PERSUADER + 1] = np.minimum(self.exchange[rows], HORIZON) / HORIZON
        out[np.arange(len(rows)), used + N_PERSUADER + 2 + np.minimum(self.exchange[rows], HORIZON - 1)] = 1.0
        return out

    def user_features(self, index: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The features of the persuadee's pending reply and which replies are allowed."""
        rows = np.arange(len(self)) if index is None else np.asarray(index)
        act = np.maximum(self.last_agent[rows], 0)
        repeats = np.maximum(self.used[rows, act] - 1, 0)  # the act just heard is already counted
        heard_at = np.maximum(self.exchange[rows] - 1, 0)  # the exchange the act was made in
        state = (act, repeats, self.positive[rows], self.negative[rows], heard_at)
        if self.rules.version == 0:
            return user_features(*state, self.personas[rows]), reply_mask(act)
        requests_before = self.requests[rows] - IS_REQUEST[act]
        return user_features_v1(*state, requests_before, self.personas[rows]), reply_mask(act)

    # ---- dynamics -------------------------------------------------------------------------------

    def step_agent(self, index: np.ndarray, acts: np.ndarray) -> None:
        index, acts = np.asarray(index), np.asarray(acts)
        if not (self.live[index] & ~self.awaiting_user[index]).all():
            raise ValueError("step_agent on an episode that is over or waiting for the persuadee")
        if ((acts < 0) | (acts >= N_PERSUADER)).any():
            raise ValueError(f"persuader acts are 0..{N_PERSUADER - 1}")
        self.last_agent[index] = acts
        self.used[index, acts] += 1
        self.exchange[index] += 1
        self.requests[index] += IS_REQUEST[acts]
        closing = acts == CLOSING
        self._end(index[closing], "persuader_closed")
        over_limit = np.zeros(len(index), bool)
        if self.rules.max_requests is not None:
            over_limit = ~closing & (self.requests[index] > self.rules.max_requests)
            self._end(index[over_limit], "request_limit")
        self.awaiting_user[index[~closing & ~over_limit]] = True

    def step_user(self, index: np.ndarray, replies: np.ndarray) -> None:
        index, replies = np.asarray(index), np.asarray(replies)
        if not self.awaiting_user[index].all():
            raise ValueError("step_user on an episode that is not waiting for the persuadee")
        _, allowed = self.user_features(index)
        if not allowed[np.arange(len(index)), replies].all():
            raise ValueError("a persuadee reply is not allowed here (decisions answer only requests)")
        self.awaiting_user[index] = False
        self.last_user[index] = replies
        up, down = count_reactions(replies)
        self.positive[index] += up
        self.negative[index] += down
        amount = replies >= FIRST_AMOUNT
        self.donation[index[amount]] = np.asarray(AMOUNTS)[replies[amount] - FIRST_AMOUNT]
        self.stated[index[amount]] = True
        self._end(index[amount], "donation")
        refused = (replies == DISAGREE) & self.rules.refusal_ends
        self._end(index[refused], "refused")
        out_of_time = index[~amount & ~refused & (self.exchange[index] >= self.exchanges)]
        self._end(out_of_time, "max_turns")

    def _end(self, index: np.ndarray, reason: str) -> None:
        self.live[index] = False
        self.awaiting_user[index] = False
        self.end_reason[index] = reason

    # ---- outcome --------------------------------------------------------------------------------

    @property
    def terminated(self) -> np.ndarray:
        return ~self.live & (self.end_reason != "max_turns")

    def agent_reward(self) -> np.ndarray:
        return np.minimum(self.donation / MAX_DONATION, 1.0)

    def success(self) -> np.ndarray:
        return self.donation > 0
