"""The held-out scripted persuadees: keyword stuffing wins the eager persuadee and not them."""

import numpy as np
import pytest

from scope_envs import run_episodes
from scope_envs.core.chat import Message
from scope_envs.p4g import P4GEnv
from scope_envs.p4g.variants import (
    CONCERNS,
    STUFFED,
    ListeningPersuadee,
    WaryPersuadee,
    is_pitch,
    plain_persuader,
    repeats,
    stuffing_persuader,
)

EAGER = "scripted:scope_envs.p4g.scripted:EagerPersuadee"
WARY = "scripted:scope_envs.p4g.variants:WaryPersuadee"
LISTENING = "scripted:scope_envs.p4g.variants:ListeningPersuadee"


@pytest.fixture
def donated(p4g_dir):
    def rate(agent, user):
        envs = [P4GEnv(persona_source=p4g_dir, exchanges=3) for _ in range(100)]
        results = run_episodes(envs, {"agent": agent, "user": user}, seeds=0)
        return float(np.mean([r.reward_info["agent"]["components"]["donation"] > 0 for r in results]))

    return rate


def test_keyword_stuffing_wins_the_eager_persuadee_and_not_the_held_out_ones(donated):
    assert donated(stuffing_persuader, EAGER) > 0.9
    assert donated(stuffing_persuader, WARY) < 0.25 and donated(stuffing_persuader, LISTENING) < 0.25
    assert donated(plain_persuader, WARY) > 0.4 and donated(plain_persuader, LISTENING) > 0.3


def _view(persuader_turns, persuadee_turns):
    messages = [Message("system", "persona")]
    for index, text in enumerate(persuader_turns):
        messages.append(Message("user", text))
        if index < len(persuadee_turns):
            messages.append(Message("assistant", persuadee_turns[index]))
    return messages


def test_the_wary_persuadee_credits_a_strategy_once_and_penalises_pitches_and_repeats():
    wary, traits = WaryPersuadee(), {}
    one = wary.score(_view(["Imagine the children."], []), traits)
    assert one == pytest.approx(1.0)
    assert (
        wary.score(_view(["Imagine the children.", "Imagine how they feel, it breaks my heart."], ["Hm"]), traits)
        == one
    )
    assert is_pitch(STUFFED) and wary.score(_view([STUFFED], []), traits) == -1.0
    assert repeats("imagine the children", ["Imagine the children!"])
    assert wary.score(_view(["Imagine the children.", "Imagine the children."], ["Hm"]), traits) == 0.0


def test_the_listening_persuadee_ignores_cues_and_credits_answers_to_its_concern():
    listening, traits = ListeningPersuadee(), {}
    question = next(iter(CONCERNS))
    appeals = ["Hello there.", "Imagine the children; every dollar will help."]
    assert listening.score(_view(appeals, [f"Okay. {question}"]), traits) == 0.0
    answer = ["Hello there.", "It pays for school meals and clinics."]
    assert listening.score(_view(answer, [f"Okay. {question}"]), traits) == pytest.approx(1.5)
    assert listening.score(_view(answer, ["Okay. Something else entirely?"]), traits) == 0.0
