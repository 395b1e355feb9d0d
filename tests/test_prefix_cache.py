"""A local model's next turn starts from the cached keys and values of the conversation it
continues (`sims.prefix_cache`, `sims.kv_batch`): what it samples is what the whole conversation
read afresh gives, it reads only what is new, and nothing computed with other weights is reused."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from baselines.training.policy import LMPolicy  # noqa: E402
from sims.hf_backend import HFSimulator  # noqa: E402
from sims.prefix_cache import CachedRow, PrefixStore  # noqa: E402
from sims.testing import TINY_DECODER, tiny_chat_model  # noqa: E402

OPENINGS = [
    [{"role": "system", "content": "You help."}, {"role": "user", "content": "give dollars to children"}],
    [{"role": "user", "content": "help order yes no"}],
    [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "yes"}],
]


def simulator(**kwargs):
    model, tokenizer = tiny_chat_model(0)
    return HFSimulator(model, tokenizer=tokenizer, max_new_tokens=8, temperature=1.0, **kwargs)


def next_turn(sim, prompt, reply, said):
    """The prompt of the next turn as a token-in, token-out trace builds it: the reply's tokens,
    its end of turn where it was cut, then the other side's message rendered."""
    tokens = reply.token_ids
    closed = tokens if tokens and tokens[-1] in sim.stop_ids else [*tokens, sim.tokenizer.eos_token_id]
    delta = sim.tokenizer(f"\n<|im_start|>user\n{said}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    return prompt + closed + list(delta["input_ids"])


def scored_afresh(sim, prompt, tokens):
    """Log-probs of `tokens` after `prompt`, the whole sequence read in one forward pass."""
    with torch.no_grad():
        logits = sim.model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / sim.temperature, -1)
    return logp.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def test_later_turns_read_only_what_is_new_and_sample_what_a_fresh_read_gives():
    sim = simulator()
    prompts = [sim.render(view) for view in OPENINGS]
    for turn in range(3):
        budgets = [8, 3, 8]  # rows of unequal reply lengths, one cut at its budget
        replies = sim.generate(prompts, [10 * turn + i for i in range(3)], budgets)
        for prompt, reply in zip(prompts, replies):
            expected = scored_afresh(sim, prompt, reply.token_ids)
            assert torch.allclose(torch.tensor(reply.logprobs), expected, atol=1e-4)
        reused = [reply.metadata["reused_prompt_tokens"] for reply in replies]
        if turn == 0:
            assert reused == [0, 0, 0]
        else:  # all but the reply's last token (never read back) and what was said since
            assert all(0 < r < len(p) for r, p in zip(reused, prompts))
            assert all(len(p) - r <= 25 for r, p in zip(reused, prompts))
        prompts = [next_turn(sim, p, r, f"turn {turn} order yes") for p, r in zip(prompts, replies)]


def test_a_prompt_that_continues_nothing_cached_is_read_whole_beside_one_that_does():
    sim = simulator()
    first = sim.render(OPENINGS[0])
    reply = sim.generate([first], [1])[0]
    continued = next_turn(sim, first, reply, "no")
    fresh = sim.render(OPENINGS[2])
    replies = sim.generate([continued, fresh], [2, 3])
    assert replies[0].metadata["reused_prompt_tokens"] > 0 and replies[1].metadata["reused_prompt_tokens"] == 0
    for prompt, reply in zip([continued, fresh], replies):
        assert torch.allclose(torch.tensor(reply.logprobs), scored_afresh(sim, prompt, reply.token_ids), atol=1e-4)


def test_an_optimizer_step_drops_every_cached_conversation():
    model, tokenizer = tiny_chat_model(0)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=6))
    prompt = policy.simulator.render(OPENINGS[0])
    reply = policy.generate([prompt], [1])[0]
    continued = next_turn(policy.simulator, prompt, reply, "yes")
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.5)
    loss = sum(p.sum() for p in policy.trainable_parameters())
    loss.backward()
    optimizer.step()  # in place: the cached keys and values were computed with other weights
    after = policy.generate([continued], [2])[0]
    assert after.metadata["reused_prompt_tokens"] == 0
    sim = policy.simulator
    assert torch.allclose(torch.tensor(after.logprobs), scored_afresh(sim, continued, after.token_ids), atol=1e-4)


def test_two_adapters_on_one_base_never_read_each_others_conversations():
    model, tokenizer = tiny_chat_model(0)
    agent = LMPolicy(
        HFSimulator(model, tokenizer=tokenizer, max_new_tokens=6), lora={"r": 4, "target_modules": ["q_proj", "v_proj"]}
    )
    user = agent.with_adapter("user")
    with torch.no_grad():  # the user's adapter computes other keys and values than the agent's
        for parameter in user.trainable_parameters():
            parameter.add_(0.3)
    prompt = agent.simulator.render(OPENINGS[0])
    reply = agent.generate([prompt], [1])[0]
    continued = next_turn(agent.simulator, prompt, reply, "yes")
    with user.active():
        as_user = user.generate([continued], [2])[0]
        assert as_user.metadata["reused_prompt_tokens"] == 0
        expected = scored_afresh(user.simulator, continued, as_user.token_ids)
    assert torch.allclose(torch.tensor(as_user.logprobs), expected, atol=1e-4)


def test_a_sliding_window_model_reads_every_prompt_whole_decided_once_per_model(monkeypatch):
    """A window counts columns, so a model with sliding-window layers never starts from a cached
    conversation; whether it can is asked once per model config, not at every generation."""
    from transformers import MistralConfig, MistralForCausalLM

    import sims.kv_batch

    asked, reuses_cached_rows = [], sims.kv_batch.reuses_cached_rows

    def counted(config):
        asked.append(config)
        return reuses_cached_rows(config)

    monkeypatch.setattr(sims.kv_batch, "reuses_cached_rows", counted)
    _, tokenizer = tiny_chat_model(0)
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=len(tokenizer),
        **TINY_DECODER,
        sliding_window=4096,  # sliding-window layers, wider than any prompt here: a fresh read is exact
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    sim = HFSimulator(MistralForCausalLM(config), tokenizer=tokenizer, max_new_tokens=6, temperature=1.0)
    prompt = sim.render(OPENINGS[0])
    for turn in range(3):
        (reply,) = sim.generate([prompt], [turn])
        assert reply.metadata["reused_prompt_tokens"] == 0
        assert torch.allclose(torch.tensor(reply.logprobs), scored_afresh(sim, prompt, reply.token_ids), atol=1e-4)
        prompt = next_turn(sim, prompt, reply, "yes")
    assert asked == [sim.model.config]


def test_the_store_keeps_at_most_its_bytes_dropping_the_oldest_first():
    def row(tokens):
        return CachedRow(tuple(tokens), [torch.zeros(1, len(tokens), 4)], [torch.zeros(1, len(tokens), 4)], "ctx")

    store = PrefixStore(max_bytes=3 * row([1, 2]).nbytes)
    old, middle, new = row([1, 2]), row([3, 4]), row([5, 6])
    store.replace([], [old, middle, new])
    assert store.longest_prefix([1, 2, 9], "ctx") is old
    store.replace([], [row([7, 8])])
    assert store.longest_prefix([1, 2, 9], "ctx") is None  # evicted, the oldest
    assert store.longest_prefix([3, 4, 9], "ctx") is middle
    assert store.longest_prefix([3, 4, 9], "other") is None
    assert store.longest_prefix([3, 4], "ctx") is None  # a prompt must add at least one token
    store.replace([middle], [])
    assert store.longest_prefix([3, 4, 9], "ctx") is None  # a continued row is superseded
