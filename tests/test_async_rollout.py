"""Per-episode asynchronous rollouts give the episodes of the lockstep rollout, whatever the order
replies come back in; dynamic batching gathers concurrent requests into one call."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from helpdesk_env import STOP, HelpdeskEnv, ScriptedClerk, ScriptedCustomer
from llm_server import LLMServer

from scope_envs.core.async_rollout import collect_async, has_native_async, play_async
from scope_envs.core.batch import DialogueBatch
from scope_envs.core.coalesce import Coalescer
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.policy import FatalPolicyError, PolicyError, Simulator, run_sync
from scope_envs.core.rollout import RolloutGroup, collect_chat


def conversations(players, rollout, count=12):
    """Each episode's final views and transcript, played by `rollout` ("lockstep" or "async")."""
    batch = DialogueBatch([HelpdeskEnv() for _ in range(count)])
    batch.reset(seeds=100, options={"split": "train"})
    if rollout == "lockstep":
        batch.play(lambda index, side: players[side])
    else:
        run_sync(play_async(batch, lambda index, side: players[side]))
    return batch.results


def groups_of(players, count=3, seed=11):
    return [RolloutGroup(seed + g, players) for g in range(count)]


def outcome(episode):
    """What a rollout decides about an episode, samples as exact token ids and masks."""
    samples = {side: [(s.ids, s.mask, s.prompt_length) for s in samples] for side, samples in episode.samples.items()}
    return (episode.group, episode.scenario_id, episode.rewards, episode.end_reason, episode.turns, samples)


def logprobs(episodes):
    return [lp for e in episodes for samples in e.samples.values() for s in samples for lp in s.logprobs]


def test_scripted_players_give_the_lockstep_episodes():
    players = {AGENT: ScriptedClerk(), USER: ScriptedCustomer()}
    lockstep = collect_chat(HelpdeskEnv, groups_of(players), group_size=3, split="train")
    per_episode = collect_async(HelpdeskEnv, groups_of(players), group_size=3, split="train")
    assert per_episode == lockstep
    assert {e.end_reason for e in per_episode} == {"user_stop"}
    assert conversations(players, "async") == conversations(players, "lockstep")


class SlowCustomer(ScriptedCustomer):
    """The scripted customer, whose first reply in about half the episodes (by seed) comes late:
    completions come back out of order."""

    deterministic = True

    def __init__(self):
        self.order = []

    async def arespond(self, messages, tools=None, *, seed=None):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0 and seed % 2:
            await asyncio.sleep(0.3)
        self.order.append(turn)
        return self.respond(messages, tools, seed=seed)


def test_out_of_order_completions_give_the_same_episodes():
    players = {AGENT: ScriptedClerk(), USER: ScriptedCustomer()}
    lockstep = collect_chat(HelpdeskEnv, groups_of(players, 4), group_size=4, split="train")
    slow = SlowCustomer()
    assert has_native_async(slow) and not has_native_async(ScriptedCustomer())
    per_episode = collect_async(
        HelpdeskEnv, groups_of({AGENT: ScriptedClerk(), USER: slow}, 4), group_size=4, split="train"
    )
    assert per_episode == lockstep
    assert slow.order != sorted(slow.order), "replies of later turns came back before earlier ones"
    slow.order.clear()
    players = {AGENT: ScriptedClerk(), USER: ScriptedCustomer()}
    assert conversations({**players, USER: slow}, "async") == conversations(players, "lockstep")
    assert slow.order != sorted(slow.order)


def short_helpdesk():
    """Conversations of the tiny model: random text, so they end at the turn limit; a short one."""
    return HelpdeskEnv(max_turns=6)


@pytest.fixture(scope="module")
def tiny_policy():
    pytest.importorskip("torch")
    from baselines.training.policy import build_policy

    return build_policy("tiny", temperature=1.0, max_new_tokens=6, device="cpu", lora=None, seed=0, side=AGENT)


def test_a_traced_language_model_gives_the_lockstep_samples(tiny_policy):
    groups = groups_of({AGENT: tiny_policy, USER: ScriptedCustomer()}, 2)
    lockstep = collect_chat(short_helpdesk, groups, group_size=3, split="train")
    per_episode = collect_async(short_helpdesk, groups, group_size=3, split="train")
    assert [outcome(e) for e in per_episode] == [outcome(e) for e in lockstep]
    assert [e.generated_tokens for e in per_episode] == [e.generated_tokens for e in lockstep]
    assert all(e.samples[AGENT] for e in per_episode)
    # batch-mates differ between the two rollouts, and so may the last bits of a float
    assert logprobs(per_episode) == pytest.approx(logprobs(lockstep), abs=1e-4)


def test_a_local_model_playing_the_user_is_batched_dynamically(tiny_policy):
    simulator = tiny_policy.simulator
    calls = []
    original = simulator.respond_batch

    def counting(batch, tools=None, *, seeds=None):
        calls.append(len(batch))
        return original(batch, tools, seeds=seeds)

    simulator.respond_batch = counting
    try:
        groups = groups_of({AGENT: ScriptedClerk(), USER: simulator}, 2)
        lockstep = collect_chat(short_helpdesk, groups, group_size=4, split="train")
        calls.clear()
        per_episode = collect_async(short_helpdesk, groups, group_size=4, split="train")
    finally:
        del simulator.respond_batch
    assert [outcome(e) for e in per_episode] == [outcome(e) for e in lockstep]
    assert calls[0] == 8, "the first turn of all eight episodes went into one generate call"


def customer_responder(protocol, body):
    """A deterministic customer: its reply depends on the view alone."""
    system = body["messages"][0]["content"]
    order_id = re.search(r"O-\d{4}", system).group(0)
    said = sum(m["role"] == "assistant" for m in body["messages"])
    last = body["messages"][-1]["content"] or ""
    mark = f"(#{body.get('seed', 0) % 1000})"  # a reply depends on its seed, as a sampling model's does
    if said >= 3 or "cancelled" in last or "status" in last:
        return {"text": f"Thanks. {STOP} {mark}"}
    return {"text": f"It is {order_id}. {mark}" if "order id" in last else f"I want to cancel my order. {mark}"}


def test_an_api_simulator_whose_replies_come_back_out_of_order_gives_the_lockstep_episodes():
    pytest.importorskip("openai")
    from sims import make_simulator

    completed = []  # the turn of each reply, in the order the server sent them
    seeds = set()

    def customer(protocol, body):
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        seeds.add(body["seed"] % 2)
        if turn == 0 and body["seed"] % 2:  # about half the episodes wait long for their first reply
            time.sleep(0.6)
        completed.append(turn)
        return customer_responder(protocol, body)

    with LLMServer(customer) as server:
        simulator = make_simulator("openai:customer", base_url=server.url + "/v1", api_key="sk-test", concurrency=16)
        try:
            assert has_native_async(simulator)
            groups = groups_of({AGENT: ScriptedClerk(), USER: simulator}, 2)
            lockstep = collect_chat(HelpdeskEnv, groups, group_size=4, split="train")
            assert completed == sorted(completed)
            completed.clear()
            per_episode = collect_async(HelpdeskEnv, groups, group_size=4, split="train")
            players = {AGENT: ScriptedClerk(), USER: simulator}
            in_lockstep = conversations(players, "lockstep", count=8)
            completed.clear()
            assert conversations(players, "async", count=8) == in_lockstep
            assert completed != sorted(completed)
        finally:
            simulator.close()
    assert seeds == {0, 1}
    assert per_episode == lockstep
    assert {e.end_reason for e in per_episode} == {"user_stop"}
    assert completed != sorted(completed), "fast episodes played on while slow ones waited"


class FailsOnTask(ScriptedCustomer):
    """Cannot reply in one scenario: that episode fails, the others play on."""

    def __init__(self, error):
        self.error = error

    def respond(self, messages, tools=None, *, seed=None):
        if "O-1002" in messages[0]["content"]:
            raise self.error
        return super().respond(messages, tools, seed=seed)


def test_a_policy_error_fails_only_its_own_episode():
    groups = groups_of({AGENT: ScriptedClerk(), USER: FailsOnTask(PolicyError("no reply"))}, 4)
    lockstep = collect_chat(HelpdeskEnv, groups, group_size=2, split="train")
    per_episode = collect_async(HelpdeskEnv, groups, group_size=2, split="train")
    assert per_episode == lockstep
    assert {e.end_reason for e in per_episode} == {"policy_error", "user_stop"}


def test_a_fatal_error_ends_the_rollout():
    groups = groups_of({AGENT: ScriptedClerk(), USER: FailsOnTask(FatalPolicyError("bad key"))}, 4)
    with pytest.raises(FatalPolicyError, match="bad key"):
        collect_async(HelpdeskEnv, groups, group_size=2, split="train")


def test_the_coalescer_gathers_waiting_requests_into_one_call():
    calls = []

    def double(items):
        calls.append(list(items))
        time.sleep(0.01)
        return [2 * i for i in items]

    async def main():
        coalescer = Coalescer(double, max_batch=5)
        first = await asyncio.gather(*(coalescer.submit(i) for i in range(8)))
        later = await asyncio.gather(coalescer.submit(100), asyncio.sleep(0.001, 0), coalescer.submit(101))
        coalescer.close()
        return first, later

    first, later = asyncio.run(main())
    assert first == [2 * i for i in range(8)]
    assert later == [200, 0, 202]
    assert calls[:2] == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert calls[2:] == [[100, 101]]


def test_the_coalescer_raises_a_failed_call_to_each_of_its_callers():
    def fail(items):
        raise ValueError(f"cannot answer {len(items)}")

    async def main():
        coalescer = Coalescer(fail)
        outcomes = await asyncio.gather(*(coalescer.submit(i) for i in range(3)), return_exceptions=True)
        coalescer.close()
        return outcomes

    assert [str(o) for o in asyncio.run(main())] == ["cannot answer 3"] * 3
    with pytest.raises(ValueError, match="max_batch"):
        Coalescer(fail, max_batch=0)


def test_a_simulator_without_an_async_form_is_not_taken_for_an_async_one():
    class Sync(Simulator):
        def respond(self, messages, tools=None, *, seed=None):
            return "ok"

    assert not has_native_async(Sync()) and not has_native_async(object())


COTRAIN = [
    "env=P4G",
    "policy=tiny",
    "method=cotrain",
    "groups_per_step=2",
    "group_size=2",
    "max_new_tokens=6",
    "env_kwargs={persona_source: synthetic, exchanges: 1}",
    "tensorboard=false",
]


def cotrain_trainer(tmp_path, rollout):
    pytest.importorskip("torch")
    from baselines.training.config import load_config
    from baselines.training.trainer import Trainer

    return Trainer(load_config(None, [*COTRAIN, f"rollout={rollout}", f"output_dir={tmp_path / rollout}"]))


def test_the_trainer_collects_the_same_groups_with_either_rollout(tmp_path):
    """Co-training: both sides are traced language models, the simulator's groups drawn by the trainer."""

    def first_step(rollout):
        trainer = cotrain_trainer(tmp_path, rollout)
        players, _ = trainer.players(0, trainer.config.groups_per_step)
        return trainer.collect(0, group_size=trainer.config.group_size, split="train", players=players)

    lockstep, per_episode = first_step("lockstep"), first_step("async")
    assert [outcome(e) for e in per_episode] == [outcome(e) for e in lockstep]
    assert all(e.samples[AGENT] and e.samples[USER] for e in per_episode)
    assert logprobs(per_episode) == pytest.approx(logprobs(lockstep), abs=1e-4)
    from baselines.training.config import load_config

    with pytest.raises(ValueError, match=r"rollout must be one of \('lockstep', 'async'\), got 'sometimes'"):
        load_config(None, ["env=P4G", "rollout=sometimes"])


@pytest.mark.slow  # pytest -m slow tests/test_async_rollout.py
def test_a_training_step_is_the_same_with_either_rollout(tmp_path):
    def first_step(rollout):
        record = cotrain_trainer(tmp_path, rollout).train_step(0)
        return {name: record[name] for name in ("reward_mean", "turns", "loss", "simulator/loss", "grad_norm")}

    assert first_step("async") == pytest.approx(first_step("lockstep"), abs=1e-4)


def test_dynamic_batching_answers_concurrent_requests_in_one_call_with_the_same_replies(tiny_policy):
    from sims.batching import DynamicBatching

    simulator = tiny_policy.simulator
    batched = DynamicBatching(simulator, max_batch=6)
    views = [
        [{"role": "system", "content": "You are a customer."}, {"role": "user", "content": f"Hi {i}"}] for i in range(8)
    ]

    async def ask():
        return await asyncio.gather(*(batched.arespond(view, seed=i) for i, view in enumerate(views)))

    replies = run_sync(ask())
    assert batched.batch_calls == 2  # six, then the two left
    alone = [simulator.respond(view, seed=i) for i, view in enumerate(views)]
    assert [r.token_ids for r in replies] == [r.token_ids for r in alone]
    with pytest.raises(TypeError, match="respond_batch"):
        DynamicBatching(object())
