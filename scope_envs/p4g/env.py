"""`P4GEnv`: Persuasion for Good (Wang et al., ACL 2019) as a two-sided dialogue environment.

The agent is the persuader, the user the persuadee. The persuader speaks first and tries to get
a donation to Save the Children out of the persuadee's $2 task payment. The episode lasts
`exchanges` exchanges (a truncation when reached); it ends earlier (terminated) when the
persuader ends its message with `[DONE]`, or, in `eager` mode, at the first donation stated.
Rewards: the agent gets `min(donation / 2, 1)` for the last donation the persuadee stated; the
user gets `1 - r` (`adversarial`) or `r` (`cooperative`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.dialogue import (
    AGENT,
    USER,
    USER_REWARDS,
    DialogueEnv,
    EpisodeEnd,
    Reward,
    Scenario,
    user_components,
    user_reward_from,
)
from scope_envs.p4g.corpus import ENV_VAR, CorpusNotFoundError, locate_corpus, read_pairs
from scope_envs.p4g.donation import MAX_DONATION, final_donation, parse_donation
from scope_envs.p4g.personas import PersonaPair, synthetic_pairs
from scope_envs.p4g.prompts import DONE_MARKER, persuadee_prompt, persuader_prompt

TERMINATION_MODES = ("eager", "wait")
SYNTHETIC_NOTE = (
    f"P4G: synthetic personas (no Persuasion for Good corpus found); to use the corpus's, set ${ENV_VAR} to the "
    "folder holding full_info.csv, pass persona_source=PATH, or download=True to fetch it once"
)
_said: set[str] = set()


def _say_once(note: str) -> None:
    """One line on stderr (a logged warning) the first time in this process, not on every env."""
    if note not in _said:
        _said.add(note)
        logging.getLogger(__name__).warning(note)


@lru_cache(maxsize=8)
def _corpus_pairs(location: str, include_flagged: bool) -> tuple[PersonaPair, ...]:
    return tuple(read_pairs(Path(location), include_flagged=include_flagged))


@lru_cache(maxsize=1)
def _synthetic_pairs() -> tuple[PersonaPair, ...]:
    return tuple(synthetic_pairs())


_INDEXES: dict[int, tuple[tuple[PersonaPair, ...], dict[str, PersonaPair], dict[str, tuple[PersonaPair, ...]]]] = {}


def _index(pairs: tuple[PersonaPair, ...]) -> tuple[dict[str, PersonaPair], dict[str, tuple[PersonaPair, ...]]]:
    """The pairs by id and by split, built once per loaded set (the loaders cache their tuples, so every
    env of a run shares one; personas hold dicts, so the set is keyed by identity and held here)."""
    held = _INDEXES.get(id(pairs))
    if held is None or held[0] is not pairs:
        by_split = {split: tuple(p for p in pairs if p.split == split) for split in ("train", "test")}
        held = _INDEXES[id(pairs)] = (pairs, {pair.dialogue_id: pair for pair in pairs}, by_split)
    return held[1], held[2]


def load_persona_pairs(
    persona_source: str | os.PathLike[str] = "auto", *, include_flagged: bool = False, download: bool = False
) -> tuple[tuple[PersonaPair, ...], str]:
    """The persona pairs and a description of where they came from.

    `persona_source`: `"auto"` (the corpus if one is found, else synthetic, said once per process in
    one logged line),
    `"corpus"` (the corpus or an error naming every way to provide it), `"synthetic"`, or a path
    to `full_info.csv` / a folder holding it / a ConvoKit corpus folder. `download`: also try the
    one-time download into the user cache (off by default: nothing goes online unless asked).
    """
    source = os.fspath(persona_source)
    if source == "synthetic":
        return _synthetic_pairs(), "synthetic"
    try:
        location = locate_corpus(None if source in {"auto", "corpus"} else source, download=download)
    except CorpusNotFoundError:
        if source != "auto":
            raise
        _say_once(SYNTHETIC_NOTE)
        return _synthetic_pairs(), "synthetic"
    return _corpus_pairs(str(location.resolve()), include_flagged), f"corpus:{location}"


class P4GEnv(DialogueEnv):
    """Persuasion for Good; see the module docstring and docs/envs/p4g.md."""

    metadata = {**DialogueEnv.metadata, "name": "p4g_v0"}  # noqa: RUF012
    scripted_policies = {  # noqa: RUF012
        "user": "scope_envs.p4g.scripted:ScriptedPersuadee",
        "agent": "scope_envs.p4g.scripted:ScriptedPersuader",
    }

    def __init__(
        self,
        *,
        persona_source: str | os.PathLike[str] = "auto",
        exchanges: int = 5,
        termination: str = "eager",
        word_limit: int = 50,
        user_reward: str = "adversarial",
        include_flagged: bool = False,
        download: bool = False,
        **kwargs: Any,
    ) -> None:
        if termination not in TERMINATION_MODES:
            raise ValueError(f"termination must be one of {TERMINATION_MODES}, got {termination!r}")
        if user_reward not in USER_REWARDS:
            raise ValueError(f"user_reward must be one of {USER_REWARDS}, got {user_reward!r}")
        if exchanges < 1:
            raise ValueError("exchanges must be at least 1")
        kwargs.setdefault("max_turns", 2 * exchanges)
        super().__init__(**kwargs)
        self.termination = termination
        self.word_limit = word_limit
        self.user_reward = user_reward
        self.pairs, self.persona_source = load_persona_pairs(
            persona_source, include_flagged=include_flagged, download=download
        )
        # What the env fell back from, for whoever offers it to people (`scope serve` says it at startup).
        self.data_notes = [SYNTHETIC_NOTE] if self.persona_source == "synthetic" and persona_source == "auto" else []
        self._by_id, self._by_split = _index(self.pairs)

    def task_ids(self, split: str = "train") -> list[str]:
        """The dialogue ids of a split (`"train"` or `"test"`), in a stable order."""
        if split not in self._by_split:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return [pair.dialogue_id for pair in self._by_split[split]]

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        split = options.get("split", "train")
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in self._by_id:
                raise ValueError(f"unknown P4G task_id {task_id!r} in {self.persona_source} personas")
            pair = self._by_id[task_id]
        else:
            candidates = self._by_split.get(split)
            if candidates is None:
                raise ValueError(f"split must be 'train' or 'test', got {split!r}")
            pair = candidates[int(rng.integers(len(candidates)))]
        return Scenario(
            scenario_id=pair.dialogue_id,
            system_prompts={
                AGENT: persuader_prompt(pair.persuader.render(), self.word_limit),
                USER: persuadee_prompt(pair.persuadee.render()),
            },
            first_speaker=AGENT,
            data={"pair": pair},
            metadata={"split": pair.split, "persona_source": self.persona_source, "termination": self.termination},
        )

    def end_reason(self, side: str, message: Message) -> str | None:
        if side == AGENT and DONE_MARKER in message.text:
            return "persuader_done"
        if side == USER and self.termination == "eager" and (parse_donation(message.text) or 0.0) > 0.0:
            return "donation"
        return None

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        persuadee_turns = [m.text for m in self.views[USER] if m.role == "assistant"]
        stated = final_donation(persuadee_turns)
        donation = stated or 0.0
        agent_reward = min(donation / MAX_DONATION, 1.0)
        persuader_turns = [m.text for m in self.views[AGENT] if m.role == "assistant"]
        over_limit = sum(len(text.split()) > self.word_limit for text in persuader_turns)
        components = {"donation": donation, "success": float(donation > 0.0)}
        details = {"donation_stated": stated is not None, "turns_over_word_limit": over_limit}
        user_value = user_reward_from(agent_reward, self.user_reward)
        return {
            AGENT: Reward(agent_reward, components, details),
            USER: Reward(
                user_value,
                user_components(components, self.user_reward),
                {**details, "user_reward": self.user_reward},
            ),
        }


def parallel_env(**kwargs: Any) -> P4GEnv:
    """The PettingZoo parallel env (`possible_agents == ["agent", "user"]`)."""
    return P4GEnv(**kwargs)
