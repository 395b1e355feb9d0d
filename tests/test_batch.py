import threading

import pytest
from helpdesk_env import STOP, HelpdeskEnv, ScriptedClerk, ScriptedCustomer

from scope_envs import DialogueBatch, PolicyError, run_episodes
from sims import Reply, Simulator


class CountingCustomer(ScriptedCustomer):
    """The scripted customer, recording the size of every batched call."""

    def __init__(self):
        self.batch_sizes = []

    def respond_batch(self, batch, tools=None, *, seeds=None):
        self.batch_sizes.append(len(batch))
        return super().respond_batch(batch, tools, seeds=seeds)


def test_run_episodes_batches_every_waiting_episode():
    customer = CountingCustomer()
    envs = [HelpdeskEnv() for _ in range(6)]
    results = run_episodes(envs, {"agent": ScriptedClerk(), "user": customer}, seeds=10, options={"split": "train"})
    assert [r.index for r in results] == list(range(6))
    assert all(r.terminated and r.end_reason == "user_stop" for r in results)
    assert all(r.rewards == {"agent": 1.0, "user": 1.0} for r in results)
    assert customer.batch_sizes[0] == 6  # the first user turn of all six episodes in one call
    assert sum(customer.batch_sizes) == sum(sum(m["role"] == "assistant" for m in r.messages["user"]) for r in results)


def test_run_episodes_is_reproducible():
    def play():
        envs = [HelpdeskEnv() for _ in range(4)]
        return [
            (r.scenario_id, r.transcript)
            for r in run_episodes(envs, {"agent": "scripted", "user": "scripted"}, seeds=3)
        ]

    assert play() == play()


def test_pending_and_step_by_hand():
    batch = DialogueBatch([HelpdeskEnv(), HelpdeskEnv()])
    batch.reset(seeds=[1, 2], options=[{"task_id": "cancel-1001"}, {"task_id": "status-1002"}])
    assert batch.pending("agent") == []
    waiting = batch.pending("user")
    assert [p.index for p in waiting] == [0, 1] and waiting[0].messages[-1]["content"].startswith("Hi!")
    batch.step("user", {0: f"bye {STOP}"})  # episode 1 is left waiting
    assert batch.results[0].end_reason == "user_stop" and batch.results[1] is None
    assert [p.index for p in batch.pending("user")] == [1]
    with pytest.raises(ValueError, match="not waiting on 'agent'"):
        batch.step("agent", {1: "hello"})
    batch.fail(1, "simulated outage")
    assert batch.done and batch.results[1].end_reason == "policy_error" and not batch.results[1].terminated


def test_a_failing_reply_costs_only_its_own_episode():
    class FlakyCustomer(Simulator):
        """Fails for one scenario; batched calls fail as a whole, so the runner retries one by one."""

        def respond(self, messages, tools=None, *, seed=None):
            if "O-1003" in messages[0]["content"]:
                raise PolicyError("429 after all retries")
            return Reply(text=f"bye {STOP}")

        def respond_batch(self, batch, tools=None, *, seeds=None):
            return [self.respond(m, t, seed=s) for m, t, s in zip(batch, tools, seeds)]

    envs = [HelpdeskEnv() for _ in range(3)]
    options = [{"task_id": t} for t in ("cancel-1001", "cancel-1003", "status-1002")]
    results = run_episodes(envs, {"agent": "scripted", "user": FlakyCustomer()}, seeds=0, options=options)
    assert [r.end_reason for r in results] == ["user_stop", "policy_error", "user_stop"]


def test_async_simulators_are_gathered_concurrently():
    class AsyncCustomer(Simulator):
        def __init__(self, n):
            self.barrier = threading.Barrier(n, timeout=10)  # releases only if all n calls are in flight at once
            self.in_flight = 0
            self.peak = 0

        async def arespond(self, messages, tools=None, *, seed=None):
            import asyncio

            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            await asyncio.sleep(0.01)
            self.in_flight -= 1
            return Reply(text=f"bye {STOP}")

    customer = AsyncCustomer(5)
    run_episodes([HelpdeskEnv() for _ in range(5)], {"agent": "scripted", "user": customer}, seeds=0)
    assert customer.peak == 5
