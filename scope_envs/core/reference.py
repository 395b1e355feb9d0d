"""Human reference data of a benchmark: what people did in the conversations a simulator replays.

A benchmark with recorded human conversations declares a loader at registration
(`register_dialogue_env(..., human_reference="module:function")`); `function(env, *, split,
limit)` returns a `HumanReference` for the env's scenarios of that split (at most `limit`
conversations; None for all). Generic code (simulator fidelity) compares a
simulator's turns with the people's on the same scenarios without knowing the benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class HumanConversation:
    """One recorded conversation: its scenario, the human's turns on `side`, and its outcome."""

    task_id: str
    turns: tuple[str, ...]
    outcome: float | None = None  # the measure named by `HumanReference.outcome`, None when unknown
    actual: float | None = None  # what the person actually did, where it differs from what they said


@dataclass(frozen=True)
class HumanReference:
    """People's conversations on one side of a benchmark.

    `outcome` names the reward component that matches a conversation's outcome (a simulated
    episode's `reward_info[side]["components"][outcome]`); the people's `outcome` must measure the
    same thing (e.g. a stated amount against a stated amount), and `actual` holds what they did
    where that differs; `act_of` labels a turn with a dialogue
    act (None when the benchmark has no act scheme); `source` says where the data came from.
    """

    side: str
    conversations: tuple[HumanConversation, ...]
    outcome: str | None = None
    act_of: Callable[[str], str] | None = None
    source: str = ""
    # the env's reward component that records the actual outcome (None: the env records none)
    actual_outcome: str | None = None
    # how well `act_of` agrees with human act labels at the unit it is applied to (a turn), as
    # a dict of accuracy, kappa, per-act F1 and the floor it puts under act distances; None when
    # the benchmark has no labelled turns
    act_quality: dict | None = None
