"""The dialogue acts of the act-level Persuasion for Good testbed, and their text form.

The persuader's acts are the P4G annotation scheme's ten persuasion strategies plus the task
acts around them (Wang et al., ACL 2019, Table 2); the persuadee's are its reactions and its
donation decisions, with the stated amount in four bins up to the $2 task payment. Every act has a
canonical sentence, so a turn renders as text (`[act] sentence`) and text parses back to the act:
language-model agents play the same game as array-based RL agents.
"""

from __future__ import annotations

import re

import numpy as np

PERSUADER_ACTS: tuple[str, ...] = (
    "greeting",
    "logical-appeal",
    "emotion-appeal",
    "credibility-appeal",
    "foot-in-the-door",
    "self-modeling",
    "personal-story",
    "donation-information",
    "source-related-inquiry",
    "task-related-inquiry",
    "personal-related-inquiry",
    "proposition-of-donation",
    "ask-donation-amount",
    "closing",
)
STRATEGIES = PERSUADER_ACTS[1:11]
PROPOSITION, ASK_AMOUNT, CLOSING = (PERSUADER_ACTS.index(a) for a in PERSUADER_ACTS[-3:])
REQUESTS = (PROPOSITION, ASK_AMOUNT)  # the acts a donation decision answers
IS_REQUEST = np.isin(np.arange(len(PERSUADER_ACTS)), REQUESTS)  # by act, as a table (np.isin is slow per turn)

AMOUNTS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)  # the stated-amount bins, by their upper edge
PERSUADEE_ACTS: tuple[str, ...] = (
    "positive-reaction",
    "neutral-reaction",
    "negative-reaction",
    "ask-org-info",
    "agree-donation",
    "disagree-donation",
    *(f"provide-amount-{amount:.2f}" for amount in AMOUNTS),
)
POSITIVE, NEUTRAL, NEGATIVE, ASK_ORG, AGREE, DISAGREE = range(6)
FIRST_AMOUNT = 6
DECISIONS = (AGREE, DISAGREE, *range(FIRST_AMOUNT, FIRST_AMOUNT + len(AMOUNTS)))

PERSUADER_TEXT: dict[str, str] = {
    "greeting": "Hi! How are you doing today?",
    "logical-appeal": "Every dollar goes to education, health care and food for children who need it most.",
    "emotion-appeal": "Imagine a child in a war zone going to bed hungry tonight. You could change that.",
    "credibility-appeal": "Save the Children has worked since 1919 and is rated highly for transparency.",
    "foot-in-the-door": "Even a few cents would help; you could start with a small amount.",
    "self-modeling": "I'm donating part of my own payment today.",
    "personal-story": "When I was young, a charity like this helped my own family through a hard year.",
    "donation-information": "Your donation comes directly out of your task payment; the research team sends it.",
    "source-related-inquiry": "Have you heard of Save the Children before?",
    "task-related-inquiry": "Do you usually give to charities?",
    "personal-related-inquiry": "Do you have kids of your own?",
    "proposition-of-donation": "Would you like to donate part of your payment to Save the Children?",
    "ask-donation-amount": "How much would you like to donate?",
    "closing": "Thank you for your time. Have a great day!",
}
PERSUADEE_TEXT: dict[str, str] = {
    "positive-reaction": "That's great to hear, they sound like a wonderful charity.",
    "neutral-reaction": "I see. Okay.",
    "negative-reaction": "I'm not sure about that. I don't really trust charities.",
    "ask-org-info": "What exactly does the organization do with the money?",
    "agree-donation": "Yes, I'd like to donate.",
    "disagree-donation": "No, I don't want to donate right now.",
    **{f"provide-amount-{amount:.2f}": f"I'll donate ${amount:.2f}." for amount in AMOUNTS},
}

_BRACKETED = re.compile(r"\[\s*([a-z0-9.\-]+)\s*\]")
_INDEX = re.compile(r"[0-9]{1,4}")


def act_text(acts: tuple[str, ...], index: int) -> str:
    name = acts[index]
    return f"[{name}] {(PERSUADER_TEXT | PERSUADEE_TEXT)[name]}"


def parse_act(acts: tuple[str, ...], text: str) -> int | None:
    """The act a text turn states: `[act-name] ...`, a bare act name, or an act's index; None if none."""
    stripped = text.strip().lower()
    if _INDEX.fullmatch(stripped):  # ASCII digits only: "²" is a digit to str.isdigit, not to int()
        return int(stripped) if int(stripped) < len(acts) else None
    match = _BRACKETED.search(stripped)
    if match and match.group(1) in acts:
        return acts.index(match.group(1))
    named = [(stripped.find(name), index) for index, name in enumerate(acts) if name in stripped]
    return min(named)[1] if named else None
