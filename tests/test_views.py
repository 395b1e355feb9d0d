import gymnasium as gym
import pytest
from helpdesk_env import STOP, HelpdeskEnv

from scope_envs import AgentView, PolicyError, UserView
from scope_envs.testing import check_view
from sims import Reply, Simulator


class PoliteCustomer(Simulator):
    """A user-written simulator class: what a researcher plugs in."""

    def __init__(self):
        self.calls = []

    def respond(self, messages, tools=None, *, seed=None):
        self.calls.append(seed)
        heard = [m["content"] for m in messages if m["role"] == "user"]
        if "order id" in heard[-1]:
            return Reply(text="It is O-1003.")
        if "cancelled" in heard[-1]:
            return Reply(text=f"Thank you! {STOP}")
        return Reply(text="Please cancel my order.")


def clerk(view: str) -> str:
    """A trivially written agent policy reading the text observation."""
    if "O-1003" not in view:
        return "What is your order id?"
    if '"status": "cancelled"' in view:
        return "Your order is cancelled."
    if "cancel_order" not in view:
        return '{"name": "cancel_order", "arguments": {"order_id": "O-1003", "reason": "late"}}'
    return "Done."


def test_make_agent_view_with_a_user_written_simulator(helpdesk_ids):
    customer = PoliteCustomer()
    env = gym.make("scope_envs:scope/TestHelpdesk-v0", simulator=customer)
    obs, info = env.reset(seed=0, options={"task_id": "cancel-1003"})
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(clerk(obs))
        total += reward
        done = terminated or truncated
    assert terminated and info["end_reason"] == "user_stop" and total == 1.0
    assert info["reward_info"]["components"] == {"db": 1.0, "user_stop": 1.0}
    assert len(customer.calls) == 3 and len(set(customer.calls)) == 3  # each reply gets its own seed
    assert env.spec.nondeterministic  # a simulator that does not declare itself deterministic
    env.close()


def test_scripted_simulator_is_the_offline_default_and_deterministic(helpdesk_ids):
    env = gym.make("scope/TestHelpdesk-v0")
    assert not env.spec.nondeterministic
    obs_a, _ = env.reset(seed=7)
    obs_b, _ = env.reset(seed=7)
    assert obs_a == obs_b
    assert "Available" not in obs_a


def test_plain_callable_as_simulator(helpdesk_ids):
    env = gym.make(
        "scope/TestHelpdesk-v0",
        simulator=lambda messages, tools: f"bye {STOP}" if len(messages) > 2 else "hi",
        max_turns=6,
    )
    env.reset(seed=0, options={"task_id": "cancel-1001"})
    _, reward, terminated, _, info = env.step("Hello there")
    assert terminated and info["end_reason"] == "user_stop" and reward == 0.0  # nothing was done for the customer
    assert env.unwrapped.dialogue.max_turns == 6  # extra make() kwargs reach the env


def test_user_view_with_scripted_agent(helpdesk_ids):
    env = gym.make("scope/TestHelpdesk-User-v0")
    obs, info = env.reset(seed=0, options={"task_id": "cancel-1001"})
    assert info["to_speak"] == "user" and obs.endswith("[user]\nHi! How can I help you today?")
    obs, _, _, _, info = env.step("I want to cancel my order.")
    assert obs.endswith("[user]\nCould you give me your order id?")
    obs, _, _, _, info = env.step("It is O-1001.")
    assert obs.endswith("[user]\nYour order O-1001 is cancelled.")  # the agent's tool calls happened in between
    _, reward, terminated, _, info = env.step(f"Thanks {STOP}")
    assert terminated and reward == 1.0


def test_policy_error_truncates_instead_of_crashing():
    class Broken(Simulator):
        def respond(self, messages, tools=None, *, seed=None):
            raise PolicyError("upstream returned 500 five times")

    view = AgentView(HelpdeskEnv(), simulator=Broken())
    view.reset(seed=0)
    _, reward, terminated, truncated, info = view.step("Hello")
    assert truncated and not terminated and info["end_reason"] == "policy_error"
    assert "500" in info["end_detail"] and reward == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        view.step("again")


def test_episode_ending_during_reset_is_reported_by_the_next_step():
    class BrokenAgent(Simulator):
        def respond(self, messages, tools=None, *, seed=None):
            raise PolicyError("no GPU left")

    class NoGreeting(HelpdeskEnv):
        def load_scenario(self, rng, options):
            scenario = super().load_scenario(rng, options)
            scenario.opening = []
            return scenario

    view = UserView(NoGreeting(), agent=BrokenAgent())
    view.reset(seed=0)  # the agent speaks first and fails
    _, reward, terminated, truncated, info = view.step("ignored")
    assert truncated and not terminated and info["end_reason"] == "policy_error" and reward == 0.0


def test_partner_tool_errors_are_surfaced(helpdesk_ids):
    class SloppyClerk(Simulator):
        def respond(self, messages, tools=None, *, seed=None):
            if messages[-1]["role"] == "tool":
                return Reply(text="Sorry, something went wrong.")
            return Reply(text='{"name": "find_order", "arguments": {"order_id": 1}}')

    env = gym.make("scope/TestHelpdesk-User-v0", agent=SloppyClerk())
    env.reset(seed=0)
    _, _, _, _, info = env.step("hi")
    assert info["partner_errors"] == ["invalid arguments for 'find_order': order_id: 1 is not of type 'string'"]
    assert info["errors"] == 1


def test_unknown_partner_spec_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy spec 'nosuch:model'"):
        AgentView(HelpdeskEnv(), simulator="nosuch:model")
    env = HelpdeskEnv()
    env.scripted_policies = {}
    with pytest.raises(ValueError, match="no scripted policy for the 'user' side"):
        AgentView(env)


def test_views_pass_gymnasium_check_env_with_a_user_written_simulator():
    class Deterministic(PoliteCustomer):
        deterministic = True

    check_view(HelpdeskEnv, AgentView, Deterministic(), episodes=2)
