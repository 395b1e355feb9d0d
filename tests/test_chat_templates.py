"""Qwen3's real chat template (vendored in tests/templates, see its README) through the trainer's
token-in, token-out traces: it re-renders earlier turns (the latest assistant turn carries a
`<think>` block, earlier ones do not), so an episode is trained as one sample per turn, each on
the exact prompt its turn was generated from, and `scope plan` counts those samples."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


from baselines.apps.plan import format_plan, plan  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from sims.testing import tiny_chat_model  # noqa: E402

QWEN3 = (Path(__file__).parent / "templates" / "qwen3.jinja").read_text()


@pytest.fixture(scope="module")
def qwen3_model(tmp_path_factory) -> Path:
    """The tiny model with Qwen3's template, saved where `hf:PATH` loads it."""
    model, tokenizer = tiny_chat_model(0)
    tokenizer.chat_template = QWEN3
    folder = tmp_path_factory.mktemp("qwen3-template")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_qwen3_template_re_renders_earlier_turns_and_chatml_does_not():
    from baselines.training.traces import template_rerenders

    _, tokenizer = tiny_chat_model(0)
    assert not template_rerenders(tokenizer)
    tokenizer.chat_template = QWEN3
    assert template_rerenders(tokenizer)


def test_qwen3_traces_train_one_sample_per_turn_on_the_exact_prompts():
    """Three turns of the policy with Qwen3's template: the second prompt still extends the first
    (no assistant turn after the last user message yet), the third does not (the previous turn's
    empty reasoning block is dropped), so the episode becomes one sample per turn."""
    from baselines.training.policy import LMPolicy
    from sims.hf_backend import HFSimulator

    model, tokenizer = tiny_chat_model(0)
    tokenizer.chat_template = QWEN3
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=6))
    trace = policy.start_trace()
    view = [{"role": "system", "content": "You persuade."}]
    for turn in range(3):
        prompt = trace.next_prompt(view, None)
        (reply,) = policy.generate([prompt], [turn])
        view = [*view, {"role": "assistant", "content": reply.text}]
        trace.record(reply.token_ids, reply.logprobs, len(view))
        view = [*view, {"role": "user", "content": f"Answer number {turn}."}]
    assert not trace.chained and len(trace.turns) == 3
    samples = trace.samples()
    assert len(samples) == 3
    for recorded, sample in zip(trace.turns, samples, strict=True):
        assert sample.ids[: sample.prompt_length] == recorded.prompt_ids  # trained on what it saw
        assert sample.ids[sample.prompt_length :] == recorded.token_ids  # and what it generated
    assert "<think>" not in tokenizer.decode(trace.turns[2].prompt_ids)  # Qwen3's fresh rendering


def test_scope_plan_counts_the_samples_of_a_re_rendering_template(qwen3_model):
    config = load_config(None, ["env=P4G", f"policy=hf:{qwen3_model}", "env_kwargs={exchanges: 2}"])
    result = plan(config)
    max_turns = 4  # 2 exchanges: 2 turns a side
    assert result.samples_per_episode.startswith("up to ")
    assert int(result.samples_per_episode.split()[-1]) >= max_turns
    assert "re-renders earlier turns" in format_plan(result)
    chatml = plan(load_config(None, ["env=P4G", "policy=tiny"]))
    assert chatml.samples_per_episode == "1"
