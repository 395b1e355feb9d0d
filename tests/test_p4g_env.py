import itertools

import gymnasium as gym
import numpy as np
import pytest

from scope_envs import run_episodes
from scope_envs.p4g import P4GEnv, parallel_env
from scope_envs.p4g.scripted import ScriptedPersuadee, detect_strategies
from scope_envs.testing import check_env
from sims import Reply, Simulator


@pytest.fixture
def corpus_env(p4g_dir):
    return lambda **kwargs: P4GEnv(persona_source=p4g_dir, **kwargs)


def test_conformance_on_the_corpus_and_synthetic_personas(corpus_env):
    check_env(lambda: corpus_env())
    check_env(lambda: parallel_env(persona_source="synthetic", termination="wait"))


def test_prompts_carry_the_task_and_each_sides_own_persona(corpus_env):
    env = corpus_env()
    _, infos = env.reset(seed=0)
    pair = env.scenario.data["pair"]
    agent_prompt, user_prompt = infos["agent"]["messages"][0]["content"], infos["user"]["messages"][0]["content"]
    assert "$2" in agent_prompt and "Save the Children" in agent_prompt and "deducted" in agent_prompt
    assert "at most 50 words" in agent_prompt and "[DONE]" in agent_prompt
    assert pair.persuader.render() in agent_prompt and pair.persuadee.render() not in agent_prompt
    assert pair.persuadee.render() in user_prompt and "[DONATE $N]" in user_prompt and "[GIVE $N]" in user_prompt
    assert "not give it away easily" in user_prompt
    assert infos["agent"]["to_speak"] == "agent" and infos["agent"]["tools"] == []
    assert infos["agent"]["scenario"] == {
        "split": "train",
        "persona_source": env.persona_source,
        "termination": "eager",
    }


def test_eager_mode_ends_at_the_first_donation(corpus_env):
    env = corpus_env(user_reward="adversarial")
    env.reset(seed=1)
    env.step({"agent": "Would you donate?"})
    _, rewards, terminated, truncated, infos = env.step({"user": "Fine. [DONATE $0.50]"})
    assert terminated["agent"] and not truncated["agent"] and infos["agent"]["end_reason"] == "donation"
    assert rewards == {"agent": 0.25, "user": 0.75}
    assert infos["agent"]["reward_info"]["components"] == {"donation": 0.5, "success": 1.0}


def test_wait_mode_runs_to_done_or_the_limit(corpus_env):
    env = corpus_env(termination="wait", user_reward="cooperative", exchanges=2)
    env.reset(seed=1)
    env.step({"agent": "Would you donate?"})
    _, _, terminated, _, _ = env.step({"user": "[DONATE $2] but I may change my mind"})
    assert not terminated["agent"]
    env.step({"agent": "Really?"})
    _, rewards, terminated, truncated, infos = env.step({"user": "On second thought, [DONATE $1]"})
    assert truncated["agent"] and not terminated["agent"] and infos["agent"]["end_reason"] == "max_turns"
    assert rewards == {"agent": 0.5, "user": 0.5}  # the last donation stated counts, even at the limit
    env.reset(seed=1)
    _, rewards, terminated, _, infos = env.step({"agent": "Thanks for chatting! [DONE]"})
    assert terminated["agent"] and infos["agent"]["end_reason"] == "persuader_done" and rewards["agent"] == 0.0


def test_refusal_is_no_donation_and_word_limit_is_reported(corpus_env):
    env = corpus_env(exchanges=1, word_limit=5)
    env.reset(seed=2)
    env.step({"agent": "Please please please donate to the children today."})
    _, rewards, _, truncated, infos = env.step({"user": "I won't donate $1, sorry."})
    assert truncated["agent"] and rewards == {"agent": 0.0, "user": 1.0}
    details = infos["agent"]["reward_info"]
    assert details["donation_stated"] is False and details["turns_over_word_limit"] == 1


def test_tasks_and_splits(corpus_env):
    env = corpus_env()
    train, test = env.task_ids("train"), env.task_ids("test")
    assert len(train) == 783 and len(test) == 207 and not set(train) & set(test)
    seen = {env.reset(seed=s)[1]["agent"]["scenario_id"] for s in range(300)}
    assert seen <= set(train)  # the test split is never drawn unless asked for
    assert {env.reset(seed=s, options={"split": "test"})[1]["agent"]["scenario_id"] for s in range(50)} <= set(test)
    _, infos = env.reset(options={"task_id": test[3]})
    assert infos["agent"]["scenario_id"] == test[3] and infos["agent"]["scenario"]["split"] == "test"
    with pytest.raises(ValueError, match="unknown P4G task_id"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="split must be"):
        env.reset(options={"split": "validation"})


def test_bad_configuration_is_rejected():
    for kwargs, message in (
        ({"termination": "soon"}, "termination"),
        ({"user_reward": "nice"}, "user_reward"),
        ({"exchanges": 0}, "exchanges"),
    ):
        with pytest.raises(ValueError, match=message):
            P4GEnv(persona_source="synthetic", **kwargs)


def test_gymnasium_views_with_defaults_and_a_user_written_simulator(p4g_dir, monkeypatch):
    monkeypatch.setenv("SCOPE_P4G_DATA", str(p4g_dir))

    class GenerousUser(Simulator):
        def respond(self, messages, tools=None, *, seed=None):
            return Reply(text="You had me at hello. [GIVE $1.50]")

    env = gym.make("scope_envs:scope/P4G-v0", simulator=GenerousUser())
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("Hello! Would you donate to Save the Children?")
    assert terminated and reward == 0.75 and info["end_reason"] == "donation"

    env = gym.make("scope/P4G-v0")  # the scripted persuadee by default
    assert not env.spec.nondeterministic
    obs, info = env.reset(seed=0)
    assert obs.startswith("[system]\nYou are the persuader")
    user_env = gym.make("scope/P4G-User-v0")  # the scripted persuader
    obs, info = user_env.reset(seed=0)
    assert obs.rstrip().endswith("Save the Children?") and info["to_speak"] == "user"


def test_scripted_persuadee_reacts_to_strategies_and_persona(corpus_env):
    assert detect_strategies("Imagine the children. They have worked since 1919.") == {
        "emotion-appeal",
        "credibility-appeal",
    }
    envs = [corpus_env() for _ in range(120)]
    results = run_episodes(envs, {"agent": "scripted", "user": "scripted"}, seeds=0)
    donations = [r.reward_info["agent"]["components"]["donation"] for r in results]
    assert 0.3 < np.mean([d > 0 for d in donations]) < 0.8  # near the corpus' 51.9%
    blunt = run_episodes(
        [corpus_env() for _ in range(120)], {"agent": lambda m, t: "Donate now.", "user": "scripted"}, seeds=0
    )
    assert sum(r.rewards["agent"] for r in blunt) < sum(r.rewards["agent"] for r in results)
    persuadee = ScriptedPersuadee()
    kind = {"care": 6.0, "agreeableness": 5.0, "intuitive": 5.0}
    cold = {"care": 1.0, "agreeableness": 1.0, "intuitive": 1.0}
    heard = ["Imagine starving children; it breaks my heart."]
    assert persuadee.persuasion(heard, kind) > persuadee.persuasion(heard, cold)


def test_the_eager_persuadee_gives_to_a_plain_ask_the_calibrated_one_refuses(corpus_env):
    """The partner of the SmolLM2 config: a short request with two appeals moves it, not the calibrated one."""

    def plain(messages, tools):
        turn = sum(m["role"] == "assistant" for m in messages)
        return "Hi! Save the Children helps kids." if turn == 0 else "Would you donate? Every dollar will help."

    def donated(user):
        results = run_episodes([corpus_env() for _ in range(60)], {"agent": plain, "user": user}, seeds=0)
        return np.mean([r.reward_info["agent"]["components"]["donation"] > 0 for r in results])

    calibrated, eager = donated("scripted"), donated("scripted:scope_envs.p4g.scripted:EagerPersuadee")
    assert calibrated < 0.1 and eager > 0.5, (calibrated, eager)


def test_scripted_episodes_are_reproducible(corpus_env):
    def play():
        return [
            r.transcript
            for r in run_episodes([corpus_env() for _ in range(5)], {"agent": "scripted", "user": "scripted"}, seeds=4)
        ]

    assert play() == play()


def test_the_scripted_persuadee_refuses_only_when_asked_and_never_refuses_then_gives():
    """`scope play P4G --episodes 2`: the persuader's "I'm donating part of mine as well" asked for
    nothing, yet the persuadee answered "I won't donate this time", then gave $0.65 a turn later."""
    from scope_envs.core.episodes import run_episodes
    from scope_envs.p4g.scripted import asks_for_donation

    refusals = ("I won't donate", "I don't think I can spare", "I'd rather keep")
    envs = [P4GEnv(persona_source="synthetic") for _ in range(100)]
    for result in run_episodes(envs, {"agent": "scripted", "user": "scripted"}, seeds=0):
        lines = result.transcript.splitlines()
        turns = [line.partition(": ") for line in lines if line.startswith(("agent:", "user:"))]
        refused = False
        for (_, _, asked), (side, _, answer) in itertools.pairwise(turns):
            if side != "user":
                continue
            if not asks_for_donation(asked):
                assert "[DONATE" not in answer and not answer.startswith(refusals), (asked, answer)
            assert not (refused and "[DONATE" in answer), result.transcript
            refused = refused or answer.startswith(refusals)
    assert not asks_for_donation("Every dollar will help with vaccines. I'm donating part of mine as well.")
    assert asks_for_donation("How much would you be willing to donate from your task payment?")
