"""The user side's outcome is its own: an adversarial persuadee that kept its money succeeded.

Before, the user side's reward components were the agent's, so `side: user` training reported the
persuader's success as the persuadee's (a persuadee trained to reward 1.000 showed success 0.000).
"""

import gymnasium as gym
import numpy as np
import pytest

from scope_envs.core.dialogue import AGENT, USER, user_components
from scope_envs.p4g.env import P4GEnv


def p4g_episode(user_reply, user_reward):
    env = P4GEnv(persona_source="synthetic", exchanges=1, user_reward=user_reward)
    env.reset(seed=0)
    env.step({AGENT: "Would you donate to Save the Children today?", USER: ""})
    env.step({AGENT: "", USER: user_reply})
    assert env.end is not None
    return {side: env.chat_infos[side]["reward_info"] for side in (AGENT, USER)}


@pytest.mark.parametrize(
    ("user_reply", "user_reward", "agent_success", "user_success"),
    [
        ("No, I will keep my money.", "adversarial", 0.0, 1.0),
        ("Okay, I will give. [DONATE $1]", "adversarial", 1.0, 0.0),
        ("No, I will keep my money.", "cooperative", 0.0, 0.0),
        ("Okay, I will give. [DONATE $1]", "cooperative", 1.0, 1.0),
    ],
)
def test_each_side_of_p4g_reports_its_own_success(user_reply, user_reward, agent_success, user_success):
    info = p4g_episode(user_reply, user_reward)
    assert info[AGENT]["components"]["success"] == agent_success
    assert info[USER]["components"]["success"] == user_success
    assert info[USER]["components"]["donation"] == info[AGENT]["components"]["donation"], "what happened is shared"


def test_the_act_level_persuadee_reports_its_own_success():
    view = gym.make("scope/PersuasionActs-User-v0")
    rng = np.random.default_rng(0)
    outcomes = set()
    for seed in range(20):
        view.reset(seed=seed)
        done = False
        while not done:
            allowed = np.flatnonzero(view.unwrapped.action_masks())
            *_, terminated, truncated, _ = view.step(int(rng.choice(allowed)))
            done = terminated or truncated
        infos = view.unwrapped.dialogue.chat_infos
        agent, user = (infos[side]["reward_info"]["components"]["success"] for side in (AGENT, USER))
        assert user == 1.0 - agent, "an adversarial persuadee succeeds where the persuader fails"
        outcomes.add(user)
    view.close()
    assert outcomes == {0.0, 1.0}, "both outcomes occur, so the check above is informative"


def test_user_components_keep_what_happened_and_map_success_only():
    components = {"donation": 0.4, "success": 1.0, "DB": 1.0}
    assert user_components(components, "adversarial") == {"donation": 0.4, "success": 0.0, "DB": 1.0}
    assert user_components(components, "cooperative") == components
    assert user_components({"DB": 0.0}, "adversarial") == {"DB": 0.0}
