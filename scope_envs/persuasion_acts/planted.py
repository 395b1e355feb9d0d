"""The mechanism testbed `PersuasionActsPlanted`: a persuadee population PLANTED in code, not fitted.

This is a mechanism test, not a claim about P4G. The corpus supports one persuadee type
(docs/study/v1/corpus_fit.md), so on `PersuasionActs-v1` a simulator that loses its minority costs
the agent nothing and no remedy for collapse has room to help. Here the minority is planted, so that
collapse has a cost a remedy could recover: the same acts, engine features (`USER_FEATURES_V1`) and
refusal rules as version 1 (a refused request ends the episode; at most `MAX_REQUESTS` requests),
with two types and an act x type interaction:

* **The majority** (`PRIOR[0]`) gives when asked at once and is put off by appeals: it reacts
  negatively to them (each negative reaction lowers the mood), and a low mood makes it refuse.
* **The minority** (`PRIOR[1]`) refuses a request made early, and gives after two appeals: it
  reacts positively to them, and two positive reactions raise its mood to tanh(1), where it gives.

So the persuader best against the majority (ask at once) is not the one best against the
population (one or two appeals, then ask; better still, appeal once and read the reaction), which is
what a simulator that sharpens its type prior (`pi ** gamma`) teaches an agent to miss: at gamma 10
the sharpened prior leaves the minority under 1% of personas. For both types a better mood also
means a larger amount, and every other act is met mostly with a neutral reaction. The temperament
column stays at weight 0: the type comes from the temperament through `type_at`, as in version 1,
though a co-trained linear simulator may put weight on it and so express which type it plays.

`python -m scope_envs.persuasion_acts.planted_measure` prints the success of a family of scripted persuaders
(`scripted_plans`) against each type and the population: the measure that the planted interaction
matters (docs/envs/persuasion_acts.md).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from scope_envs.persuasion_acts.acts import PERSUADEE_ACTS, PERSUADER_ACTS, REQUESTS
from scope_envs.persuasion_acts.model import N_PERSONA, N_PERSUADEE
from scope_envs.persuasion_acts.population import FITTED_FEATURES, Population, load_population

VERSION = 2  # `PersuasionActsEnv(version=2)`, registered as `PersuasionActsPlanted`
MAJORITY, MINORITY = 0, 1
PRIOR = (0.62, 0.38)  # at gamma 10 the minority keeps (0.38 / 0.62) ** 10 / (1 + ...) < 1% of personas
MAX_REQUESTS = 6  # as version 1's (the most requests any corpus persuader made)
APPEALS = ("logical-appeal", "emotion-appeal", "credibility-appeal")  # the acts the types react to in opposite ways
AMOUNTS = ("provide-amount-0.25", "provide-amount-0.50", "provide-amount-1.00", "provide-amount-2.00")

# Reply logits (zero where not given), by the act heard. Every act that is neither an appeal nor a
# request is met mostly with a neutral reaction, by both types.
TO_OTHER_ACTS = {"neutral-reaction": 2.0}
# Appeals: the majority mostly reacts negatively (mood down), the minority positively (mood up).
TO_APPEALS = (
    {"negative-reaction": 3.0, "neutral-reaction": 0.5},
    {"positive-reaction": 3.0, "neutral-reaction": 0.5},
)
# Requests (a proposition or an amount request), both types: reactions are rare (a neutral one lets
# the persuader ask again), agreeing is possible, and the amount's bin is the same function of the
# mood for both types.
TO_REQUESTS = {
    "positive-reaction": -2.0,
    "negative-reaction": -2.0,
    "ask-org-info": -2.0,
    "agree-donation": -1.0,
    **dict(zip(AMOUNTS, (0.0, 0.5, 0.5, -0.5))),
}
# Giving (each amount's logit) and refusing at a request, by type: an intercept and a slope in the
# mood. The majority gives at mood 0 and refuses more as appeals sour it; the minority refuses at
# mood 0 and gives at mood tanh(1) (two positive reactions).
GIVING = ((2.0, 2.0), (-1.5, 3.5))  # (intercept, mood slope) of each amount's logit, majority and minority
REFUSING = ((-1.0, -2.5), (2.5, -3.5))  # (intercept, mood slope) of disagree-donation's logit
# Both types: the better the mood, the larger the amount. Without it a collapsed simulator's modal
# majority gives the same amount after an appeal as at once, so an agent trained on it is indifferent
# to appealing and its seeds scatter between the two policies; with it, souring the majority costs.
AMOUNT_MOOD = dict(zip(AMOUNTS, (-1.0, 0.0, 1.0, 1.0)))
PERSONA_GIVING = {"persona:agreeableness": 0.3}  # both types: agreeable persuadees give a little more


@lru_cache(maxsize=1)
def planted_population() -> Population:
    """The planted population, a `Population` as the fitted one is (reply weights over
    `FITTED_FEATURES`; the Big Five drawn independently)."""
    weights = np.zeros((len(PRIOR), N_PERSUADEE, len(FITTED_FEATURES)))

    def add(kind: int, replies: dict[str, float], feature: str) -> None:
        for reply, value in replies.items():
            weights[kind, PERSUADEE_ACTS.index(reply), FITTED_FEATURES.index(feature)] += value

    requests = {PERSUADER_ACTS[act] for act in REQUESTS}
    for kind in (MAJORITY, MINORITY):
        for act in PERSUADER_ACTS:
            heard = f"heard:{act}"
            add(kind, TO_APPEALS[kind] if act in APPEALS else TO_REQUESTS if act in requests else TO_OTHER_ACTS, heard)
            if act in requests:
                add(kind, dict.fromkeys(AMOUNTS, GIVING[kind][0]) | {"disagree-donation": REFUSING[kind][0]}, heard)
        add(kind, dict.fromkeys(AMOUNTS, GIVING[kind][1]) | {"disagree-donation": REFUSING[kind][1]}, "mood")
        add(kind, AMOUNT_MOOD, "mood")
        for trait, value in PERSONA_GIVING.items():
            add(kind, dict.fromkeys(AMOUNTS, value), trait)
    return Population(
        prior=np.array(PRIOR),
        weights=weights,
        persona_correlation=np.eye(N_PERSONA),
        max_requests=MAX_REQUESTS,
        meta={"planted": "scope_envs/persuasion_acts/planted.py: a mechanism test, not a claim about P4G"},
    )


def population_for(version: int) -> Population:
    """The persuadee population of a testbed version: the corpus fit (1) or the planted one of the
    mechanism testbed (2); version 0 has none."""
    if version == 1:
        return load_population()
    if version == VERSION:
        return planted_population()
    raise ValueError(f"PersuasionActs version {version!r} has no persuadee population (versions 1 and 2 do)")
