"""The persuadee model of the act-level testbed: features, reference behaviour, simulator families.

A persuadee's reply to the persuader's act is a softmax over its acts, linear in the features of
the moment (`user_features`): the act just heard, how often the persuader has used it already,
the persuadee's mood so far (its positive minus negative reactions), how far the conversation has
gone, and its persona (Big Five, z-scored). Donation decisions answer only a proposition or a
request for the amount; elsewhere they are masked out.

`W_shared`, the reference behaviour all families share, is fitted on the act-annotated P4G
dialogues (`calibrate.py` regenerates `reference.json` from the corpus). A family `f` - one
simulator, as one LLM would be - has `W_f = W_shared + spread * E_f` with `E_f` standard normal
seeded by `f`: its own idiosyncratic reactions. Its plain sampling draws from `p_ref ** gamma`
(normalised): `gamma > 1` is the alignment sharpening that concentrates a simulator on its modal
replies, the formal model of simulator collapse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from scope_envs.persuasion_acts.acts import (
    AGREE,
    DECISIONS,
    DISAGREE,
    NEGATIVE,
    PERSUADEE_ACTS,
    PERSUADER_ACTS,
    POSITIVE,
    REQUESTS,
)

REFERENCE_PATH = Path(__file__).with_name("reference.json")
HORIZON = 10  # exchanges that progress features are scaled by (P4G dialogues last about ten)
MAX_REPEATS = 3
PERSONA_LIMIT = 4.0
PERSONA_TRAITS = ("extraversion", "agreeableness", "conscientiousness", "neuroticism", "openness")
N_PERSUADER, N_PERSUADEE, N_PERSONA = len(PERSUADER_ACTS), len(PERSUADEE_ACTS), len(PERSONA_TRAITS)

USER_FEATURES: tuple[str, ...] = (
    *(f"heard:{a}" for a in PERSUADER_ACTS),
    "repeats",
    "mood",
    "progress",
    *(f"persona:{t}" for t in PERSONA_TRAITS),
)
AGENT_FEATURES: tuple[str, ...] = (
    "bias",
    *(f"heard:{a}" for a in (*PERSUADEE_ACTS, "nothing")),
    *(f"said:{a}" for a in (*PERSUADER_ACTS, "nothing")),
    *(f"used:{a}" for a in PERSUADER_ACTS),
    "mood",
    "progress",
    *(f"exchange:{t}" for t in range(HORIZON)),
)


def mood(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    return np.tanh((np.asarray(positive, float) - np.asarray(negative, float)) / 2.0)


def user_features(
    act: np.ndarray,
    repeats: np.ndarray,
    positive: np.ndarray,
    negative: np.ndarray,
    exchange: np.ndarray,
    persona: np.ndarray,
) -> np.ndarray:
    """`[N, len(USER_FEATURES)]`: what the persuadee's reply to `act` depends on."""
    act = np.asarray(act)
    out = np.zeros((len(act), len(USER_FEATURES)))
    out[np.arange(len(act)), act] = 1.0
    out[:, N_PERSUADER] = np.minimum(repeats, MAX_REPEATS) / MAX_REPEATS
    out[:, N_PERSUADER + 1] = mood(positive, negative)
    out[:, N_PERSUADER + 2] = np.minimum(exchange, HORIZON) / HORIZON
    out[:, N_PERSUADER + 3 :] = persona
    return out


_REPLY_MASKS = np.ones((N_PERSUADER, N_PERSUADEE), dtype=bool)  # [heard act] -> the replies allowed
_REPLY_MASKS[np.ix_([a for a in range(N_PERSUADER) if a not in REQUESTS], list(DECISIONS))] = False
_RAISES_MOOD = np.isin(np.arange(N_PERSUADEE), (POSITIVE, AGREE))
_LOWERS_MOOD = np.isin(np.arange(N_PERSUADEE), (NEGATIVE, DISAGREE))


def reply_mask(act: np.ndarray) -> np.ndarray:
    """`[N, N_PERSUADEE]` booleans: donation decisions only answer a proposition or an amount request."""
    return _REPLY_MASKS[np.asarray(act)]  # table lookups: np.isin costs more than the rest of a turn


def count_reactions(reply: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which replies raise (positive reaction, agreeing) and lower (negative, refusing) the mood."""
    reply = np.asarray(reply)
    return _RAISES_MOOD[reply], _LOWERS_MOOD[reply]


@dataclass(frozen=True)
class Reference:
    """The fitted table: shared reply weights and the persona distribution."""

    weights: np.ndarray  # [N_PERSUADEE, len(USER_FEATURES)]
    persona_correlation: np.ndarray  # [N_PERSONA, N_PERSONA]
    meta: dict

    def family_weights(self, family: int, spread: float = 1.0) -> np.ndarray:
        noise = np.random.default_rng([0x5C0FE, int(family)]).standard_normal(self.weights.shape)
        return self.weights + spread * noise

    def personas(self, split: str, count: int) -> np.ndarray:
        """`count` personas (z-scored Big Five) of a split, correlated as in the corpus; fixed per split."""
        stream = {"train": 1, "test": 2}[split]
        normal = np.random.default_rng([0xB16, stream]).standard_normal((count, N_PERSONA))
        personas = normal @ np.linalg.cholesky(self.persona_correlation).T
        return np.round(np.clip(personas, -PERSONA_LIMIT, PERSONA_LIMIT), 3)  # rounded: text renders them exactly


@lru_cache(maxsize=4)
def load_reference(path: str | Path = REFERENCE_PATH) -> Reference:
    data = json.loads(Path(path).read_text())
    if tuple(data["user_features"]) != USER_FEATURES or tuple(data["persuadee_acts"]) != PERSUADEE_ACTS:
        raise ValueError(f"{path} was fitted for other features or acts: regenerate it with calibrate.py")
    return Reference(np.array(data["weights"]), np.array(data["persona_correlation"]), data["meta"])
