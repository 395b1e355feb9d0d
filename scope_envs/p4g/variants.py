"""Scripted persuadees that keyword counting does not move: a held-out panel for a persuader
trained against `EagerPersuadee`, which adds up strategy cues and so can be won over by one
message stuffed with every cue (simulator collapse in miniature).

Both keep the eager persuadee's threshold (persona leaning plus seeded noise, no base reluctance)
and its rule that it gives only when asked, from the second turn on; what persuades them differs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.p4g.scripted import ScriptedPersuadee, _z, detect_strategies, strategy_weight

PITCH_STRATEGIES = 3  # a turn with this many strategies or more reads as a sales pitch
REPEAT_OVERLAP = 0.5  # word-set Jaccard with an earlier turn above which a turn is a repetition
PENALTY = 1.0
WORD = re.compile(r"[a-z']+")


def _words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def is_pitch(text: str) -> bool:
    return len(detect_strategies(text)) >= PITCH_STRATEGIES


def repeats(text: str, earlier: list[str]) -> bool:
    words = _words(text)
    return any(len(words & (seen := _words(e))) / max(1, len(words | seen)) > REPEAT_OVERLAP for e in earlier)


class WaryPersuadee(ScriptedPersuadee):
    """Credits each strategy once, and only from turns that make at most two points: a turn that
    names three strategies or more is a sales pitch and costs a point, as does a turn that repeats
    an earlier one (more than half its words the same)."""

    name = "wary-persuadee"
    reluctance = 0.0

    def score(self, messages: list[Message], traits: dict[str, Any]) -> float:
        heard = self.heard(messages)
        credited: set[str] = set()
        score = 0.0
        for index, text in enumerate(heard):
            if is_pitch(text) or repeats(text, heard[:index]):
                score -= PENALTY
                continue
            fresh = detect_strategies(text) - credited
            credited |= fresh
            score += sum(strategy_weight(strategy, traits) for strategy in fresh)
        return score

    @staticmethod
    def react(last: str, margin: float, rng: np.random.Generator) -> str:
        if is_pitch(last):
            return str(rng.choice(["This sounds like a sales pitch.", "That's a lot at once. Slow down."]))
        return ScriptedPersuadee.react(last, margin, rng)


# The questions the listening persuadee raises, and the words that answer each.
CONCERNS: dict[str, tuple[str, ...]] = {
    "What does Save the Children actually do with the money?": (
        "school", "food", "meal", "health", "medicine", "clinic", "shelter", "program", "water",
    ),
    "How do I know the money gets there?": (
        "report", "audit", "percent", "%", "overhead", "track", "receipt", "accountab", "transparen",
    ),
    "Why should I give now rather than later?": (
        "now", "today", "crisis", "emergency", "winter", "right away", "urgent", "this year",
    ),
}  # fmt: skip


def raised_concern(text: str) -> str | None:
    return next((question for question in CONCERNS if question in text), None)


def answers(text: str, concern: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in CONCERNS[concern])


class ListeningPersuadee(ScriptedPersuadee):
    """Ignores strategy keywords: it raises a concern whenever it is not asked (what the money
    does, how it is tracked, why now) and is persuaded by turns that answer the concern it just
    raised (`1.5` each, more for rational personas); a sales pitch or a repeated turn costs a point."""

    name = "listening-persuadee"
    reluctance = 0.0

    def score(self, messages: list[Message], traits: dict[str, Any]) -> float:
        heard, said = self.heard(messages), self.said(messages)
        weight = max(0.0, 1.5 * (1.0 + 0.25 * _z(traits, "rational")))
        score = 0.0
        for index, text in enumerate(heard):
            if is_pitch(text) or repeats(text, heard[:index]):
                score -= PENALTY
                continue
            concern = raised_concern(said[index - 1]) if 0 < index <= len(said) else None
            if concern is not None and answers(text, concern):
                score += weight
        return score

    @staticmethod
    def react(last: str, margin: float, rng: np.random.Generator) -> str:
        if is_pitch(last):
            return "This sounds like a sales pitch. " + str(rng.choice(list(CONCERNS)))
        opener = str(rng.choice(["I see.", "Okay.", "Hmm."]))
        return f"{opener} {rng.choice(list(CONCERNS))}"


# Two hand-written persuaders that show what the held-out persuadees reward: one message stuffed
# with every strategy cue (it wins the keyword-counting persuadee, not these), and three plain
# turns that say what the charity does with the money and then ask (they win both kinds).
STUFFED = (
    "Imagine starving children; because every dollar will help, Save the Children since 1919 is rated by "
    "Charity Navigator. Even a small amount, I will donate too, my friend, deducted directly. "
    "Have you heard of it? How much would you donate? Do you have kids?"
)
PLAIN = (
    "Hi! Have you heard of Save the Children? It helps kids in need.",
    "It runs schools, meals and clinics for children, and reports every program it funds.",
    "Would you donate part of your payment? Even a little helps right now, in this crisis.",
)


def stuffing_persuader(messages: list[dict[str, Any]], tools: Any) -> str:
    return STUFFED


def plain_persuader(messages: list[dict[str, Any]], tools: Any) -> str:
    return PLAIN[min(sum(m["role"] == "assistant" for m in messages), len(PLAIN) - 1)]
