"""Test material: `check_simulator`, the conformance suite every simulator backend's tests call; a tiny
chat model to test with, and `fine_tune_on_completions` to steer it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scope_envs.core.chat import Message, ToolCall, function_tool
from scope_envs.core.dialogue import AGENT, USER, DialogueEnv, EpisodeEnd, Reward, Scenario
from scope_envs.core.policy import Reply, Simulator

VIEW = [
    {"role": "system", "content": "You are a customer of an online shop. Answer briefly."},
    {"role": "user", "content": "Hello! How can I help you today?"},
]
TOOLS = [
    function_tool(
        "lookup",
        "Look up an order.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    )
]


def check_simulator(simulator: Simulator, *, episodes: bool = True) -> None:
    """Raises `AssertionError` at the first violation of the simulator contract."""
    reply = simulator.respond(VIEW, seed=1)
    _check_reply(reply)
    assert reply.text or reply.tool_calls, "a reply says something or calls a tool"
    _check_reply(simulator.respond([Message.from_openai(m) for m in VIEW], seed=2))  # Message objects too
    _check_reply(simulator.respond(VIEW, TOOLS, seed=3))
    _check_reply(asyncio.run(simulator.arespond(VIEW, seed=4)))
    batch = simulator.respond_batch([VIEW, VIEW[:1], VIEW], [None, None, TOOLS], seeds=[5, 6, 7])
    assert len(batch) == 3
    for item in batch:
        _check_reply(item)
    if simulator.deterministic:
        assert simulator.respond(VIEW, seed=9).text == simulator.respond(VIEW, seed=9).text, (
            "deterministic means deterministic"
        )

    async def inside_a_running_loop() -> Reply:
        return simulator.respond(VIEW, seed=10)

    _check_reply(asyncio.run(inside_a_running_loop()))
    if episodes:
        _check_in_env(simulator)


def _check_reply(reply: Any) -> None:
    assert isinstance(reply, Reply), f"respond must return a Reply, got {type(reply).__name__}"
    assert isinstance(reply.text, str)
    assert isinstance(reply.tool_calls, tuple) and all(isinstance(c, ToolCall) for c in reply.tool_calls)
    for call in reply.tool_calls:
        assert call.name, "tool calls are named"
    if reply.token_ids is not None:
        assert reply.logprobs is not None and len(reply.logprobs) == len(reply.token_ids), "one log-prob per token"
        assert all(lp <= 0.0 for lp in reply.logprobs), "log-probabilities are at most 0"
    assert isinstance(reply.metadata, dict)
    reply.to_message()


class SmallTalkEnv(DialogueEnv):
    """A benchmark-free conversation for checking policies: the agent greets a shop customer,
    the user answers; it ends after `exchanges` exchanges, or when a side writes `BYE`."""

    def __init__(self, exchanges: int = 2, **kwargs: Any) -> None:
        super().__init__(max_turns=2 * exchanges, **kwargs)

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        return Scenario(
            "small-talk",
            {AGENT: "You are a shop assistant. Be brief.", USER: VIEW[0]["content"]},
            metadata={"split": options.get("split", "train")},
        )

    def end_reason(self, side: str, message: Message) -> str | None:
        return "bye" if "BYE" in message.text else None

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        value = float(end.reason == "bye")
        return {AGENT: Reward(value, {"bye": value}), USER: Reward(value, {"bye": value})}


def _check_in_env(simulator: Simulator) -> None:
    """The simulator plays the user side of a whole (benchmark-free) episode."""
    from scope_envs.core.views import AgentView

    view = AgentView(SmallTalkEnv(exchanges=2), simulator=simulator)
    view.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, info = view.step("Hello! What can I do for you today?")
        done, steps = terminated or truncated, steps + 1
        assert steps <= 2
    assert info["end_reason"] in {"bye", "max_turns", "error_budget", "policy_error"}


CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] or '' }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# The sizes of the tiny decoders tests build: a few thousand parameters, milliseconds a step.
TINY_DECODER = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def tiny_chat_model(seed: int = 0) -> tuple[Any, Any]:
    """A randomly initialised Llama-architecture model and a byte-level BPE tokenizer with a ChatML
    template, built locally in well under a second: a real transformers model for tests."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [m["content"] for m in VIEW] + ["system user assistant tool give dollars children help order yes no"]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<|pad|>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    fast.chat_template = CHATML_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        **TINY_DECODER,
        max_position_embeddings=2048,
        pad_token_id=fast.pad_token_id,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.bos_token_id,
    )
    return LlamaForCausalLM(config), fast


def fine_tune_on_completions(
    model: Any, examples: Sequence[tuple[list[int], list[int]]], steps: int, lr: float = 3e-3
) -> None:
    """Supervised steps toward each (prompt ids, completion ids) example in turn, the loss on the
    completion alone: a prompt given two completions ends up answered with either about equally
    often, at a temperature of 1."""
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        for prompt_ids, completion_ids in examples:
            ids = torch.tensor([prompt_ids + completion_ids])
            labels = ids.clone()
            labels[0, : len(prompt_ids)] = -100
            model(input_ids=ids, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
