"""`run_episodes` plays per episode whenever a player answers asynchronously (an API client), with a
bound on requests in flight per player, and gives the episodes of the lockstep form; so do its
callers (`scope play`, `scope evaluate`)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from helpdesk_env import STOP, HelpdeskEnv, ScriptedClerk, ScriptedCustomer
from llm_server import LLMServer
from test_async_rollout import customer_responder

from scope_envs import run_episodes
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.policy import Reply, Simulator

pytest.importorskip("openai")


def slow_first_replies(completed):
    """The deterministic customer, whose first reply in about half the episodes (by seed) comes late;
    `completed` gets the turn of each reply in the order the server sent them."""

    def customer(protocol, body):
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        if turn == 0 and body["seed"] % 2:
            time.sleep(0.6)
        completed.append(turn)
        return customer_responder(protocol, body)

    return customer


def test_an_api_simulator_is_played_per_episode_by_default_and_gives_the_lockstep_episodes():
    from sims import make_simulator

    completed = []
    with LLMServer(slow_first_replies(completed)) as server:
        simulator = make_simulator("openai:customer", base_url=server.url + "/v1", api_key="sk-test", concurrency=16)
        try:

            def play(**kwargs):
                completed.clear()
                envs = [HelpdeskEnv() for _ in range(8)]
                return run_episodes(envs, {AGENT: ScriptedClerk(), USER: simulator}, seeds=5, **kwargs)

            by_default = play()
            assert completed != sorted(completed), "fast episodes played on while slow ones waited"
            lockstep = play(rollout="lockstep")
            assert completed == sorted(completed)
            assert by_default == lockstep  # every field of every episode
            assert play(rollout="async") == lockstep
        finally:
            simulator.close()
    assert {r.end_reason for r in lockstep} == {"user_stop"}


def test_players_without_an_async_form_keep_the_lockstep_form():
    customer = ScriptedCustomer()
    calls = []
    original = customer.respond_batch

    def counting(batch, tools=None, *, seeds=None):
        calls.append(len(batch))
        return original(batch, tools, seeds=seeds)

    customer.respond_batch = counting
    results = run_episodes([HelpdeskEnv() for _ in range(6)], {AGENT: "scripted", USER: customer}, seeds=1)
    assert calls[0] == 6, "the first user turn of all six episodes in one batched call"
    forced = run_episodes(
        [HelpdeskEnv() for _ in range(6)], {AGENT: "scripted", USER: ScriptedCustomer()}, seeds=1, rollout="async"
    )
    assert forced == results


class CountingCustomer(Simulator):
    """Natively asynchronous; ends each conversation at once, recording its peak of requests in flight."""

    deterministic = True

    def __init__(self):
        self.in_flight = 0
        self.peak = 0

    async def arespond(self, messages, tools=None, *, seed=None):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.02)
        self.in_flight -= 1
        return Reply(text=f"bye {STOP}")


def test_requests_in_flight_are_bounded_per_player():
    envs = [HelpdeskEnv() for _ in range(12)]
    unbounded = CountingCustomer()
    run_episodes(envs, {AGENT: "scripted", USER: unbounded}, seeds=0)
    assert unbounded.peak == 12
    bounded = CountingCustomer()
    run_episodes([HelpdeskEnv() for _ in range(12)], {AGENT: "scripted", USER: bounded}, seeds=0, in_flight=3)
    assert bounded.peak == 3
    own = CountingCustomer()
    own.concurrency = 5  # a player's own limit (an API simulator's `concurrency`) is the default bound
    run_episodes([HelpdeskEnv() for _ in range(12)], {AGENT: "scripted", USER: own}, seeds=0)
    assert own.peak == 5
    with pytest.raises(ValueError, match="in_flight"):
        run_episodes([HelpdeskEnv()], {AGENT: "scripted", USER: CountingCustomer()}, in_flight=0)
    with pytest.raises(ValueError, match="rollout must be one of"):
        run_episodes([HelpdeskEnv()], {AGENT: "scripted", USER: "scripted"}, rollout="sideways")


def test_scope_play_plays_an_api_simulator_per_episode(helpdesk_ids, monkeypatch, capsys):
    from baselines.cli import main

    completed = []
    with LLMServer(slow_first_replies(completed)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        args = ["play", "TestHelpdesk", "--episodes", "6", "--seed", "5", "--json", "--simulator", "openai:customer"]
        assert main(args) == 0
        assert completed != sorted(completed)
        by_default = capsys.readouterr().out
        assert main([*args, "--rollout", "lockstep"]) == 0
    lines = [json.loads(line) for line in by_default.splitlines()]
    assert len(lines) == 6 and {line["end_reason"] for line in lines} == {"user_stop"}
    assert by_default == capsys.readouterr().out


def test_scope_evaluate_plays_an_api_simulator_per_episode(helpdesk_ids, monkeypatch):
    from baselines.apps.evaluate import EvalSettings, Player, play_cell
    from sims import make_simulator

    completed = []
    with LLMServer(slow_first_replies(completed)) as server:
        simulator = make_simulator("openai:customer", base_url=server.url + "/v1", api_key="sk-test")
        try:
            settings = EvalSettings(env="TestHelpdesk", tasks=3, trials=2, seed=5, split="train").validate()
            cell = play_cell(settings, Player("clerk", ScriptedClerk(), "clerk"), Player("api", simulator, "api"))
        finally:
            simulator.close()
    assert completed != sorted(completed), "fast episodes played on while slow ones waited"
    assert cell.successes == [[1.0, 1.0]] * 3


def test_per_episode_play_runs_on_the_api_simulators_own_loop():
    """No thread hop per request: the rollout runs where the client lives, and an instant
    (scripted) player answers right there too."""
    import threading

    from sims import make_simulator

    threads = set()

    class Clerk(ScriptedClerk):
        def respond(self, messages, tools=None, *, seed=None):
            threads.add(threading.current_thread().name)
            return super().respond(messages, tools, seed=seed)

    with LLMServer(customer_responder) as server:
        simulator = make_simulator("openai:customer", base_url=server.url + "/v1", api_key="sk-test")
        try:
            results = run_episodes([HelpdeskEnv() for _ in range(4)], {AGENT: Clerk(), USER: simulator}, seeds=2)
            assert threads == {"scope-OpenAISimulator"}

            async def nested():
                return simulator.run_on_loop(lambda: asyncio.sleep(0))

            with pytest.raises(RuntimeError, match="would wait for itself"):
                simulator.run_on_loop(nested)
        finally:
            simulator.close()
    assert {r.end_reason for r in results} == {"user_stop"}
