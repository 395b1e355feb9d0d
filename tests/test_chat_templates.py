"""Qwen3's real chat template (vendored in tests/templates, see its README) through the trainer's
token-in, token-out traces: it re-renders earlier turns (the latest assistant turn carries a
`<think>` block, earlier ones do not), so an episode is trained as one sample per turn, each on
the exact prompt its turn was generated from, and `scope plan` counts those samples."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from training_helpers import TINY_P4G  # noqa: E402

from baselines.config import load_config  # noqa: E402
from baselines.plan import format_plan, plan  # noqa: E402
from baselines.trainer import Trainer  # noqa: E402
from scope_envs.core.dialogue import AGENT  # noqa: E402
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
    from baselines.traces import template_rerenders

    _, tokenizer = tiny_chat_model(0)
    assert not template_rerenders(tokenizer)
    tokenizer.chat_template = QWEN3
    assert template_rerenders(tokenizer)


def test_qwen3_episodes_train_one_sample_per_turn_on_the_exact_prompts(qwen3_model, tmp_path):
    # 3 exchanges: Qwen3 extends the first prompt, and re-renders from the third on
    settings = [s for s in TINY_P4G if not s.startswith(("policy=", "env_kwargs="))]
    settings.append("env_kwargs={persona_source: synthetic, exchanges: 3}")
    trainer = Trainer(
        load_config(None, [*settings, f"policy=hf:{qwen3_model}", f"output_dir={tmp_path}", "tensorboard=false"])
    )
    players, _ = trainer.players(0, trainer.config.groups_per_step)
    recorded = []
    rollout_policy = trainer.learners[AGENT].policy
    start_trace = rollout_policy.start_trace

    def keep_trace():
        trace = start_trace()
        recorded.append(trace)
        return trace

    rollout_policy.start_trace = keep_trace
    episodes = trainer.collect(0, group_size=trainer.config.group_size, split="train", players=players)
    tokenizer = rollout_policy.tokenizer
    assert any(len(trace.turns) >= 3 for trace in recorded)
    for trace in recorded:
        assert not trace.chained or len(trace.turns) < 3
        for turn, sample in zip(trace.turns, trace.samples(), strict=True):
            assert sample.ids[: sample.prompt_length] == turn.prompt_ids  # trained on what it saw
            assert sample.ids[sample.prompt_length :] == turn.token_ids  # and what it generated
    samples = sum(len(e.samples[AGENT]) for e in episodes)
    per_turn = sum(len(trace.turns) for trace in recorded if not trace.chained)
    assert samples == per_turn + sum(1 for trace in recorded if trace.chained) > len(episodes)
    # a later prompt is Qwen3's fresh rendering: the previous turn's empty reasoning block is gone
    later = [tokenizer.decode(turn.prompt_ids) for trace in recorded for turn in trace.turns[1:]]
    assert later and all("<think>" not in prompt for prompt in later)


def test_scope_plan_counts_the_samples_of_a_re_rendering_template(qwen3_model):
    config = load_config(None, ["env=P4G", f"policy=hf:{qwen3_model}", "env_kwargs={exchanges: 2}"])
    result = plan(config)
    max_turns = 4  # 2 exchanges: 2 turns a side
    assert result.samples_per_episode.startswith("up to ")
    assert int(result.samples_per_episode.split()[-1]) >= max_turns
    assert "re-renders earlier turns" in format_plan(result)
    chatml = plan(load_config(None, ["env=P4G", "policy=tiny"]))
    assert chatml.samples_per_episode == "1"
