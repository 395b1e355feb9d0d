"""`check_simulator`: the conformance suite every simulator backend's tests call."""

from __future__ import annotations

import asyncio
from typing import Any

from scope_envs.core.chat import Message, ToolCall, function_tool
from sims.base import Reply, Simulator

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


def _check_in_env(simulator: Simulator) -> None:
    """The simulator plays the user side of a whole P4G episode (synthetic personas, no data)."""
    from scope_envs.core.views import AgentView
    from scope_envs.p4g import P4GEnv

    view = AgentView(P4GEnv(persona_source="synthetic", exchanges=2), simulator=simulator)
    view.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, info = view.step("Would you donate part of your $2 to Save the Children?")
        done, steps = terminated or truncated, steps + 1
        assert steps <= 2
    assert info["end_reason"] in {"donation", "max_turns", "persuader_done", "error_budget", "policy_error"}


CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] or '' }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


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
    corpus = [m["content"] for m in VIEW] + ["system user assistant tool donate dollars children help order yes no"]
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
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=fast.pad_token_id,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.bos_token_id,
    )
    return LlamaForCausalLM(config), fast
