"""The rollout protocol: chat rollouts, token-in token-out traces, and the benchmark-declared one."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from helpdesk_env import HelpdeskEnv, ScriptedCustomer

from baselines.training.policy import build_policy
from scope_envs.core.chat import ToolCall
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.policy import Reply
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import RolloutGroup, collect_chat


class ToolThenText:
    """A tiny language model whose turns are fixed: a `find_order` call first, then a text answer.
    Its token ids are the tokenizer's encoding of what it says, as a real generation's would be."""

    def __init__(self) -> None:
        self.policy = build_policy(
            "tiny", temperature=1.0, max_new_tokens=64, device=None, lora=None, seed=0, env=None, side=AGENT
        )
        self.turns = 0

    def start_trace(self):
        return self.policy.start_trace()

    def generate(self, prompts, seeds):
        replies = []
        for _ in prompts:
            call = ToolCall.create("find_order", {"order_id": "O-1001"}) if self.turns == 0 else None
            text = call.arguments if call else "Your order O-1001 is being processed."
            ids = self.policy.tokenizer(text, add_special_tokens=False)["input_ids"] + [
                self.policy.tokenizer.eos_token_id
            ]
            replies.append(
                Reply(
                    text="" if call else text,
                    tool_calls=(call,) if call else (),
                    token_ids=ids,
                    logprobs=[-1.0] * len(ids),
                )
            )
            self.turns += 1
        return replies


def test_a_tool_result_reaches_the_next_prompt_of_the_trained_side():
    agent = ToolThenText()
    (episode,) = collect_chat(
        HelpdeskEnv, [RolloutGroup(7, {AGENT: agent, USER: ScriptedCustomer()})], group_size=1, split="train"
    )
    (sample,) = episode.samples[AGENT]
    tokenizer = agent.policy.tokenizer
    context = tokenizer.decode([i for i, m in zip(sample.ids, sample.mask) if m == 0])
    trained = tokenizer.decode([i for i, m in zip(sample.ids, sample.mask) if m == 1])
    assert '"status": "processing"' in context, "the tool's result is in the prompt of the turn after the call"
    assert "processing" not in trained.split("Your order")[0], "and it is never trained on"
    assert episode.end_reason == "user_stop" and agent.turns >= 2


def test_the_benchmark_declares_its_vectorized_rollout():
    rollout = find_env("PersuasionActs").rollout_function()
    assert rollout is not None and rollout is not collect_chat
    assert find_env("scope/P4G-User-v0").rollout_function() is None
    with pytest.raises(ValueError, match="unknown environment 'Nope'"):
        find_env("Nope")
