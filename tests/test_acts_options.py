"""The act-level testbed's array-native options: `obs=`, masks, lean infos, AEC, and the batched vector env."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import api_test
from pettingzoo.utils import parallel_to_aec

import scope_envs  # noqa: F401
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.persuasion_acts import parallel_env
from scope_envs.persuasion_acts.acts import ASK_AMOUNT, DECISIONS, PERSUADEE_ACTS, PERSUADER_ACTS, PROPOSITION
from scope_envs.persuasion_acts.vector import PersuasionActsVectorEnv

ENV_ID = "scope/PersuasionActs-v0"


@pytest.mark.parametrize("obs", ["features", "text", "both"])
@pytest.mark.parametrize("action_mask", [False, True])
def test_every_observation_lies_in_its_declared_space(obs, action_mask):
    env = parallel_env(obs=obs, action_mask=action_mask)
    observations, _ = env.reset(seed=1)
    for act in (0, PROPOSITION, ASK_AMOUNT):
        for side in (AGENT, USER):
            assert env.observation_space(side).contains(observations[side]), (side, observations[side])
        if env.agents:
            speaker = env.to_speak
            action = act if speaker == AGENT else int(np.flatnonzero(env.action_mask(USER))[0])
            observations, *_ = env.step({speaker: action})


def test_the_env_and_its_views_default_to_a_box_and_keep_text_as_an_option():
    assert isinstance(parallel_env().observation_space(AGENT), spaces.Box)
    assert set(parallel_env(obs="both").observation_space(AGENT).spaces) == {"features", "text"}
    view = gym.make(ENV_ID)
    assert isinstance(view.observation_space, spaces.Box)
    observation, _ = view.reset(seed=0)
    assert view.observation_space.contains(observation)
    text_view = gym.make(ENV_ID, obs="text")
    observation, _ = text_view.reset(seed=0)
    assert isinstance(observation, str) and "Persuasion for Good" in observation


def test_masks_in_the_observation_follow_the_dialogue_rules():
    env = parallel_env(obs="features", action_mask=True)
    observations, _ = env.reset(seed=0)
    assert set(observations[AGENT]) == {"observation", "action_mask"}
    assert observations[AGENT]["action_mask"].all()
    assert observations[USER]["action_mask"].all(), "the side not to speak gets all ones (its act is ignored)"
    observations, *_ = env.step({AGENT: 1, USER: 0})  # a strategy: no decision may answer it
    allowed = observations[USER]["action_mask"].astype(bool)
    assert not allowed[list(DECISIONS)].any() and allowed[: len(PERSUADEE_ACTS) - len(DECISIONS)].all()
    observations, *_ = env.step({USER: 0, AGENT: 0})
    observations, *_ = env.step({AGENT: PROPOSITION, USER: 0})
    assert observations[USER]["action_mask"][list(DECISIONS)].all()


def test_lean_infos_are_numeric_with_the_same_keys_at_every_step():
    env = parallel_env(obs="features", info="lean")
    _, infos = env.reset(seed=2)
    keys = {side: set(info) for side, info in infos.items()}
    assert keys[AGENT] == {"speaking", "action_mask"}
    while env.agents:
        speaker = env.to_speak
        action = int(np.flatnonzero(env.action_mask(speaker))[-1])
        _, _, _, _, infos = env.step({speaker: action, "agent" if speaker == USER else USER: 0})
        for side, info in infos.items():
            assert set(info) == keys[side]
            assert all(np.asarray(value).dtype.kind in "iub" for value in info.values())
    masked = parallel_env(obs="features", action_mask=True, info="lean")
    assert set(masked.reset(seed=0)[1][AGENT]) == {"speaking"}, "the mask is in the observation, not twice"


def test_the_full_infos_hold_the_dialogue_and_an_ndarray_mask():
    env = parallel_env(info="full")
    _, infos = env.reset(seed=0)
    assert infos[AGENT]["to_speak"] == AGENT and infos[AGENT]["messages"] == env.chat_infos[AGENT]["messages"]
    np.testing.assert_array_equal(infos[USER]["action_mask"], np.zeros(len(PERSUADEE_ACTS), np.int8))


def test_the_user_view_gives_masks_that_maskable_learners_read():
    view = gym.make("scope/PersuasionActs-User-v0")
    view.reset(seed=0)
    masks = view.get_wrapper_attr("action_masks")()  # how SB3's env_method reaches it through wrappers
    assert masks.dtype == bool and masks.shape == (len(PERSUADEE_ACTS),)
    assert masks[: len(PERSUADEE_ACTS) - len(DECISIONS)].all() and not masks[list(DECISIONS)].any()  # after a greeting


def test_bad_options_are_refused_clearly():
    with pytest.raises(ValueError, match="obs must be one of"):
        parallel_env(obs="pixels")
    with pytest.raises(ValueError, match="info must be one of"):
        parallel_env(info="none")
    with pytest.raises(ValueError, match="obs must be 'features'"):
        gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="vector_entry_point", obs="text")


@pytest.mark.parametrize("action_mask", [False, True])
def test_the_aec_conversion_of_the_array_env_passes_pettingzoos_api_test(action_mask):
    api_test(parallel_to_aec(parallel_env(obs="features", action_mask=action_mask, info="lean")), num_cycles=200)


# ---- the batched vector env ---------------------------------------------------------------------


def test_make_vec_builds_the_batched_env_with_the_views_spaces():
    vector = gym.make_vec(ENV_ID, num_envs=3, vectorization_mode="vector_entry_point")
    single = gym.make(ENV_ID)
    assert isinstance(vector.unwrapped, PersuasionActsVectorEnv)
    assert vector.single_observation_space == single.observation_space
    assert vector.single_action_space == single.action_space == spaces.Discrete(len(PERSUADER_ACTS))
    observations, _ = vector.reset(seed=0)
    assert observations.shape == (3, *single.observation_space.shape)
    assert vector.observation_space.contains(observations)


def test_vector_episodes_end_restart_and_score_like_the_view():
    """Always asking for the amount: the batch and one-at-a-time views agree on its mean reward."""
    vector = gym.make_vec(ENV_ID, num_envs=2000, vectorization_mode="vector_entry_point")
    vector.reset(seed=0)
    finished, restarted = [], False
    for _ in range(12):
        _, rewards, terminated, truncated, _ = vector.step(np.full(2000, ASK_AMOUNT))
        ended = terminated | truncated
        assert not (terminated & truncated).any() and (rewards[~ended] == 0).all()
        finished.append(rewards[ended])
        restarted |= ended.any()
    batch_mean = np.concatenate(finished).mean()
    view = gym.make(ENV_ID)
    view_rewards = []
    for episode in range(150):
        view.reset(seed=episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = view.step(ASK_AMOUNT)
            done = terminated or truncated
        view_rewards.append(reward)
    # reward std is about 0.35: 150 episodes give a standard error near 0.03, so 0.1 is over 3 of them
    assert restarted and abs(batch_mean - np.mean(view_rewards)) < 0.1, (batch_mean, np.mean(view_rewards))


def test_vector_env_refuses_bad_actions_and_keeps_its_state():
    vector = PersuasionActsVectorEnv(2, action_mask=True)
    observations, _ = vector.reset(seed=5)
    for bad in (np.array([0, len(PERSUADER_ACTS)]), np.array([0.5, 1.0]), np.array([1, 2, 3])):
        with pytest.raises(ValueError, match="acts"):
            vector.step(bad)
    again = vector._observe()
    np.testing.assert_array_equal(again["observation"], observations["observation"])
    assert again["action_mask"].all()


def test_vector_env_is_reproducible_from_its_seed():
    def play(seed):
        vector = PersuasionActsVectorEnv(64, simulator="family:2@2")
        vector.reset(seed=seed)
        return [vector.step(np.arange(64) % len(PERSUADER_ACTS))[1] for _ in range(8)]

    np.testing.assert_array_equal(play(3), play(3))
    assert not all(np.array_equal(a, b) for a, b in zip(play(3), play(4)))


def test_a_gymnasium_view_plays_its_partner_from_the_chat_infos_whatever_its_info_option():
    lean, full = (gym.make("scope_envs:scope/PersuasionActs-v0", info=mode) for mode in ("lean", "full"))
    assert set(lean.reset(seed=0)[1]) == {"speaking", "action_mask"}
    full.reset(seed=0)
    for act in (0, 1, PROPOSITION):
        (lean_obs, *lean_rest), (full_obs, *full_rest) = lean.step(act)[:4], full.step(act)[:4]
        np.testing.assert_array_equal(lean_obs, full_obs)
        assert lean_rest == full_rest
