import threading

import gymnasium as gym
import numpy as np
from helpdesk_env import STOP, HelpdeskEnv

from scope_envs import AgentView, ThreadVectorEnv
from sims import Reply, Simulator


class RendezvousCustomer(Simulator):
    """Replies only once every sub-environment is waiting on it: proves the calls overlap."""

    deterministic = True

    def __init__(self, n):
        self.barrier = threading.Barrier(n, timeout=20)

    def respond(self, messages, tools=None, *, seed=None):
        self.barrier.wait()
        return Reply(text="Please cancel O-1001." if len(messages) < 4 else f"Thanks {STOP}")


def test_sub_environments_step_concurrently_with_sync_semantics():
    customer = RendezvousCustomer(3)
    vec = ThreadVectorEnv([lambda: AgentView(HelpdeskEnv(), simulator=customer) for _ in range(3)])
    obs, infos = vec.reset(seed=0, options={"task_id": "cancel-1001"})
    assert isinstance(obs, tuple) and len(obs) == 3 and all("Please cancel O-1001." in o for o in obs)
    assert list(infos["to_speak"]) == ["agent"] * 3
    obs, rewards, terminated, truncated, infos = vec.step(("Sure.", "Sure.", "Sure."))
    assert terminated.all() and not truncated.any() and np.array_equal(rewards, np.zeros(3))
    assert list(infos["end_reason"]) == ["user_stop"] * 3
    # NEXT_STEP autoreset, exactly as SyncVectorEnv: the next step resets and ignores the actions
    obs, rewards, terminated, truncated, infos = vec.step(("x", "y", "z"))
    assert not terminated.any() and all("Please cancel O-1001." in o for o in obs)
    vec.close()


def test_same_step_autoreset_reports_final_info():
    vec = ThreadVectorEnv([lambda: AgentView(HelpdeskEnv(max_turns=3)) for _ in range(2)], autoreset_mode="SameStep")
    vec.reset(seed=1)
    _, _, terminated, truncated, infos = vec.step(("a", "b"))
    assert (terminated | truncated).all()
    assert list(infos["final_info"]["end_reason"]) == ["max_turns", "max_turns"]
    vec.close()


def test_async_vector_env_needs_shared_memory_off_for_text():
    """What vector.py documents: the process-based vector env works for text only without shared memory."""
    fns = [lambda: AgentView(HelpdeskEnv()) for _ in range(2)]
    vec = gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    obs, _ = vec.reset(seed=0)
    assert all(o.startswith("[system]") for o in obs)
    vec.close()
