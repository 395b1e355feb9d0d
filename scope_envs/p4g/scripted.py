"""Scripted Persuasion for Good policies: a persuadee that reacts to persuasion strategies, and a
persuader that uses them. Both read everything from their view (the persona block of the system
prompt, the conversation so far), hold no state, and are deterministic given the seed.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.scripted import ScriptedSimulator
from scope_envs.p4g.donation import MAX_DONATION, parse_donation
from scope_envs.p4g.personas import parse_persona_block
from scope_envs.p4g.prompts import DONE_MARKER

# Cues of the ten P4G persuasion strategies (Wang et al. 2019, Table 2), matched in persuader turns.
STRATEGY_CUES: dict[str, tuple[str, ...]] = {
    "logical-appeal": (
        "because",
        "make a difference",
        "every dollar",
        "impact",
        "education",
        "health care",
        "vaccin",
        "will help",
    ),
    "emotion-appeal": ("imagine", "suffer", "heart", "starv", "dying", "hungry", "no food", "feel", "devastat", "war"),
    "credibility-appeal": (
        "since 1919",
        "charity navigator",
        "rated",
        "reputable",
        "transparent",
        "trusted",
        "accountab",
    ),
    "foot-in-the-door": ("even a little", "small amount", "a few cents", "any amount", "start with", "just a little"),
    "self-modeling": ("i donate", "i will donate", "i'll donate", "i gave", "i also give", "i'm donating"),
    "personal-story": ("my friend", "my family", "i remember", "when i was", "i once", "my own"),
    "donation-information": ("deducted", "your payment", "task payment", "directly", "research team"),
    "source-related-inquiry": ("heard of", "familiar with", "do you know", "are you aware"),
    "task-related-inquiry": ("would you", "how much", "willing to", "consider donating", "like to donate"),
    "personal-related-inquiry": ("do you have", "have you ever", "do you donate", "kids", "your own children"),
}
# Which persona traits make each strategy work on this persuadee (z-scored against the corpus).
STRATEGY_AFFINITY: dict[str, tuple[str, ...]] = {
    "logical-appeal": ("rational", "openness"),
    "emotion-appeal": ("care", "intuitive", "agreeableness"),
    "credibility-appeal": ("conscientiousness", "rational", "security"),
    "foot-in-the-door": ("agreeableness", "conform"),
    "self-modeling": ("conform", "tradition"),
    "personal-story": ("intuitive", "extraversion"),
    "donation-information": ("rational",),
    "source-related-inquiry": ("openness",),
    "task-related-inquiry": ("agreeableness",),
    "personal-related-inquiry": ("extraversion", "agreeableness"),
}
TRAIT_NORMS = {  # corpus mean and sd (full_info.csv)
    "rational": (4.10, 0.75), "openness": (3.69, 0.69), "care": (4.53, 0.92), "intuitive": (3.14, 1.02),
    "agreeableness": (3.92, 0.87), "conscientiousness": (3.91, 0.72), "security": (4.26, 1.41),
    "conform": (3.83, 1.49), "tradition": (3.48, 1.53), "extraversion": (3.23, 0.91), "benevolence": (4.45, 1.42),
    "universalism": (4.50, 1.50), "power": (3.64, 1.41), "hedonism": (3.54, 1.37),
}  # fmt: skip
RELUCTANCE = 8.5
GIVING = re.compile(r"\b(donat\w*|give|contribut\w*|how much|amount)\b", re.IGNORECASE)
# A request: a question, a polite or direct ask. "I'm donating part of mine as well" speaks of
# giving without asking; answering it with a refusal made a persuadee refuse, then give.
REQUEST = re.compile(
    r"\?|\b(would you|will you|could you|can you|please|willing to|consider)\b|(^|[.!]\s+)(donate|give|contribute)\b",
    re.IGNORECASE,
)


def asks_for_donation(text: str) -> bool:
    """Whether a persuader's message asks the persuadee to give (not just speaks of giving)."""
    return bool(GIVING.search(text) and REQUEST.search(text))


def _z(traits: dict[str, Any], name: str) -> float:
    mean, sd = TRAIT_NORMS[name]
    value = traits.get(name)
    return (float(value) - mean) / sd if isinstance(value, (int, float)) else 0.0


def strategy_weight(strategy: str, traits: dict[str, Any]) -> float:
    """What one use of a strategy is worth to a persona: `1 + 0.5 * affinity`, at least 0."""
    affinity = float(np.mean([_z(traits, t) for t in STRATEGY_AFFINITY[strategy]]))
    return max(0.0, 1.0 + 0.5 * affinity)


@functools.lru_cache(maxsize=1 << 14)  # pure; every turn re-reads what was heard before
def detect_strategies(text: str) -> frozenset[str]:
    lowered = text.lower()
    return frozenset(name for name, cues in STRATEGY_CUES.items() if any(cue in lowered for cue in cues))


class ScriptedPersuadee(ScriptedSimulator):
    """Donates once persuasion that suits its persona outweighs its reluctance.

    Each strategy the persuader has used adds `1 + 0.5 * affinity` (affinity: the mean z-score of
    the persona traits the strategy appeals to); each of two repetitions adds a third as much.
    The reluctance threshold rises with power and hedonism and falls with benevolence and
    universalism, plus seeded noise; its base, `RELUCTANCE`, is set so that against the scripted
    persuader about half of the corpus' persuadees donate, as about half did in the corpus
    (51.9%, mean $0.35). Asked to donate above the threshold, it donates an amount
    growing with the margin, stated with the `[DONATE $N]` marker; below it, it declines or asks.
    """

    name = "scripted-persuadee"
    reluctance = RELUCTANCE

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        traits = parse_persona_block(self.system_prompt(messages))
        heard = self.heard(messages)
        already = [value for text in self.said(messages) if (value := parse_donation(text)) is not None]
        if already:
            return str(
                rng.choice(["Glad I could help.", "Happy to do it. Thanks for telling me about it.", "You're welcome!"])
            )
        score = self.score(messages, traits)
        leaning = _z(traits, "power") + _z(traits, "hedonism") - _z(traits, "benevolence") - _z(traits, "universalism")
        threshold = self.reluctance + 0.5 * leaning + float(rng.normal(0.0, 1.0))
        last = heard[-1] if heard else ""
        if not asks_for_donation(last) or len(heard) < 2:
            return self.react(last, score - threshold, rng)
        if score <= threshold:
            return str(rng.choice([
                "I'd rather keep my payment, sorry. I won't donate this time.",
                "I don't think I can spare any of it right now.",
                "What does Save the Children actually do with the money?",
                "I'm not convinced yet. How do I know the money gets there?",
            ]))  # fmt: skip
        amount = min(MAX_DONATION, 0.05 * round((0.1 + 0.25 * (score - threshold) + float(rng.uniform(0, 0.3))) / 0.05))
        amount = max(amount, 0.05)
        return str(rng.choice([
            f"Okay, you've convinced me. [DONATE ${amount:.2f}]",
            f"Alright, I'll give some of it. [DONATE ${amount:.2f}]",
            f"That sounds like a good cause. [DONATE ${amount:.2f}]",
        ]))  # fmt: skip

    def score(self, messages: list[Message], traits: dict[str, Any]) -> float:
        """How persuaded the conversation so far has left it (compared with its threshold)."""
        return self.persuasion(self.heard(messages), traits)

    @staticmethod
    def persuasion(heard: list[str], traits: dict[str, Any]) -> float:
        counts: dict[str, int] = {}
        for text in heard:
            for strategy in detect_strategies(text):
                counts[strategy] = counts.get(strategy, 0) + 1
        return sum(
            strategy_weight(strategy, traits) * (1.0 + (min(count, 3) - 1) / 3) for strategy, count in counts.items()
        )

    @staticmethod
    def react(last: str, margin: float, rng: np.random.Generator) -> str:
        lowered = last.lower()
        if "heard of" in lowered or "familiar" in lowered:
            return str(
                rng.choice(["No, I haven't. What is it?", "I've heard the name, but I don't know much about it."])
            )
        if "how are you" in lowered:
            return str(rng.choice(["I'm doing well, thanks. You?", "Good, thanks for asking."]))
        if "?" in last and not GIVING.search(last):
            return str(rng.choice(["Not really, tell me more.", "I'm not sure. Why do you ask?"]))
        if margin > 0:
            return str(
                rng.choice(["That's really moving.", "I didn't know that, it sounds important.", "That makes sense."])
            )
        if margin > -1.5:
            return str(rng.choice(["Hmm, okay.", "I see.", "Interesting. Who runs it?"]))
        return str(
            rng.choice(["I'm not sure about charities like this.", "I need this money too, honestly.", "Okay..."])
        )


class EagerPersuadee(ScriptedPersuadee):
    """The scripted persuadee with no base reluctance: it still needs to be asked, from the second
    turn on, by persuasion that outweighs its persona's leaning and the noise. A partner a small
    model can learn against: untrained SmolLM2-135M gets a donation in about a quarter of its
    episodes, where the calibrated persuadee gives it none (`p4g_smollm2.yaml`)."""

    name = "eager-persuadee"
    reluctance = 0.0


# The scripted persuader's plan: one strategy a turn, closing with a request and [DONE].
PERSUADER_TURNS: tuple[tuple[str, ...], ...] = (
    ("Hi! How are you today? Have you heard of Save the Children?", "Hello! Are you familiar with Save the Children?"),
    (
        "They have helped children in need since 1919 and are rated highly by Charity Navigator.",
        "It is a reputable, transparent charity that has worked for children since 1919.",
    ),
    (
        "Imagine children with no food or safe place to sleep. Your help goes straight to them.",
        "Many children in war zones are starving; it breaks my heart.",
    ),
    (
        "Even a small amount makes a difference because it pays for health care and education. I will donate too.",
        "Every dollar will help with vaccines and schooling. I'm donating part of mine as well.",
    ),
    (
        "Would you like to donate part of your task payment? It is deducted directly, any amount helps.",
        "How much would you be willing to donate from your task payment? Even a few cents helps.",
    ),
)


class ScriptedPersuader(ScriptedSimulator):
    """Greets and asks about the charity, then credibility, emotion and logic, then asks for an
    amount; thanks and ends with `[DONE]` once the persuadee has donated (or after declining twice)."""

    name = "scripted-persuader"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        heard = self.heard(messages)
        turn = len(self.said(messages))
        donations = [value for text in heard if (value := parse_donation(text)) is not None]
        if donations and donations[-1] > 0:
            return f"Thank you so much, that will really help the children! {DONE_MARKER}"
        if turn >= len(PERSUADER_TURNS):
            declines = sum("won't" in h or "don't" in h or "rather keep" in h for h in heard)
            if declines >= 2:
                return f"I understand. Thank you for your time anyway. {DONE_MARKER}"
            return str(rng.choice(PERSUADER_TURNS[-1]))
        return str(rng.choice(PERSUADER_TURNS[turn]))
