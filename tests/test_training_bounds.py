"""What a first GPU run would hit, checked on the CPU with the tiny model: failed episodes kept out
of the gradient, sequences bounded by `max_model_len` on every generation path, one log-prob
estimator for both engines, frozen full-fine-tuning pool snapshots, no KV cache in the training
forward, Dr. GRPO's constant, resumable CUDA generators, pruned served adapters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from training_helpers import TINY_P4G  # noqa: E402

from baselines.apps.plan import plan  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.policy import LMPolicy  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402
from scope_envs.core.dialogue import AGENT  # noqa: E402
from sims.hf_backend import HFSimulator  # noqa: E402
from sims.testing import tiny_chat_model  # noqa: E402

BASE = [*TINY_P4G, "tensorboard=false"]


def trainer_for(tmp_path: Path, *overrides: str) -> Trainer:
    return Trainer(load_config(None, [*BASE, f"output_dir={tmp_path}", *overrides]))


def train_episodes(trainer: Trainer, step: int = 0):
    players, labels = trainer.players(step, trainer.config.groups_per_step)
    episodes = trainer.collect(step, group_size=trainer.config.group_size, split="train", players=players)
    return episodes, labels


def gradient_after_update(trainer: Trainer, episodes, labels) -> tuple[list, dict]:
    learner = trainer.learners[AGENT]
    stats = trainer.update(learner, episodes, list(range(trainer.config.groups_per_step)), labels)
    return [p.grad.detach().clone() for p in learner.policy.trainable_parameters()], stats


# ---- 1. failed episodes ----------------------------------------------------------------------------


def test_policy_error_episodes_never_enter_the_gradient(tmp_path):
    # lr 0: the update leaves the weights as they are and its gradient in .grad
    trainer = trainer_for(tmp_path, "lr=0", "grad_clip=1.0e9", "group_size=4", "max_failed_episode_share=1")
    episodes, labels = train_episodes(trainer)
    # rewards that differ within each group, so that the kept episodes have advantages
    episodes = [dataclasses.replace(e, rewards={**e.rewards, AGENT: float(i % 2)}) for i, e in enumerate(episodes)]
    # an API outage in the middle of two episodes of group 0 and three of group 1
    failed = {0, 1, 4, 5, 6}
    outage = [dataclasses.replace(e, end_reason="policy_error") if i in failed else e for i, e in enumerate(episodes)]
    kept = [e for i, e in enumerate(episodes) if i in {2, 3}]  # group 1 keeps one episode: dropped whole
    expected, _ = gradient_after_update(trainer, kept, labels)
    got, stats = gradient_after_update(trainer, outage, labels)
    assert any(float(g.abs().sum()) > 0 for g in expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)
    assert stats["dropped_groups"] == 1
    assert stats["trained_tokens"] == sum(sum(s.mask) for e in kept for s in e.samples[AGENT])


def test_failed_episodes_are_counted_in_the_step_metrics(tmp_path):
    trainer = trainer_for(tmp_path, "max_failed_episode_share=1")
    collect = trainer.collect

    def with_outage(*args, **kwargs):
        episodes = collect(*args, **kwargs)
        return [dataclasses.replace(episodes[0], end_reason="policy_error"), *episodes[1:]]

    trainer.collect = with_outage
    record = trainer.train_step(0)
    assert record["failed_episodes"] == 1 and record["dropped_groups"] == 0


# ---- 3. max_model_len on every generation path --------------------------------------------------------


@pytest.mark.parametrize("rollout", ["lockstep", "async"])
def test_sequences_never_pass_max_model_len_and_a_full_context_ends_the_episode(tmp_path, rollout):
    probe = trainer_for(tmp_path / "probe")
    episodes, _ = train_episodes(probe)
    first_prompt = min(s.prompt_length for e in episodes for s in e.samples[AGENT])
    longest = max(len(s.ids) for e in episodes for s in e.samples[AGENT])
    cap = first_prompt + 12  # room for the first turn (8 tokens) and part of a second
    assert longest > cap  # without the cap, the episodes run past it
    trainer = trainer_for(tmp_path / "capped", f"max_model_len={cap}", f"rollout={rollout}")
    episodes, _ = train_episodes(trainer)
    assert all(len(s.ids) <= cap for e in episodes for s in e.samples[AGENT])
    assert "max_model_len" in {e.end_reason for e in episodes}
    assert all(e.samples[AGENT] for e in episodes)  # the turns generated before the cap are kept


def test_a_turn_is_cut_to_fit_the_model_length():
    model, tokenizer = tiny_chat_model(0)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=16), max_model_len=40)
    prompt = policy.simulator.render([{"role": "user", "content": "hi " * 40}])
    short, long = prompt[-30:], prompt[-40:]
    assert len(long) == 40
    cut, full = policy.generate([short, long], [1, 2])
    assert len(short) + len(cut.token_ids) <= 40 and len(cut.token_ids) >= 1
    assert full.end_reason == "max_model_len"


# ---- 5. one estimator for both engines ----------------------------------------------------------------


def test_the_transformers_engine_uses_the_training_forward_as_old_log_probs(tmp_path):
    """Sampled log-probs off from the training forward's (as a cache-vs-forward gap is): the
    ratio is 1 at the first update, the gap goes to the truncated importance weight."""
    trainer = trainer_for(tmp_path, "lr=0")
    episodes, labels = train_episodes(trainer)
    shifted = []
    for episode in episodes:
        samples = [
            dataclasses.replace(s, logprobs=[lp + 0.3 * m for lp, m in zip(s.logprobs, s.mask)])
            for s in episode.samples[AGENT]
        ]
        shifted.append(dataclasses.replace(episode, samples={**episode.samples, AGENT: samples}))
    _, stats = gradient_after_update(trainer, shifted, labels)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["clip_fraction"] == 0.0
    assert stats["behaviour_log_ratio_abs"] == pytest.approx(0.3, abs=0.01)  # the gap, measured
    assert stats["is_weight_mean"] < 1.0


# ---- 6. full-fine-tuning pool snapshots ---------------------------------------------------------------


def test_full_fine_tuning_pool_snapshots_are_frozen_in_dtype_as_planned(tmp_path):
    config = load_config(
        None,
        [*BASE, f"output_dir={tmp_path}", "method=population", "dtype=bfloat16", "pool_size=2", "groups_per_step=2"],
    )
    trainer = Trainer(config)
    (member,) = trainer.pool.members
    snapshot = trainer.pool.load(member)
    parameters = list(snapshot.model.parameters())
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in parameters)
    loaded = sum(p.numel() * p.element_size() for p in parameters)
    resident = min(config.pool_size, config.groups_per_step)
    assert plan(config).pool == resident * loaded


# ---- 7. Dr. GRPO's constant ------------------------------------------------------------------------


def test_dr_grpo_divides_by_sequences_times_the_sequence_budget(tmp_path):
    trainer = trainer_for(tmp_path, "aggregation=constant", "advantage=dr_grpo", "max_model_len=2048")
    assert trainer.learners[AGENT].loss_config.constant_tokens == 2048
    p4g = load_config("p4g_qwen3_4b", ["aggregation=constant"])
    # the paper's normaliser for one step of 16 x 8 sequences of at most max_model_len tokens
    loss_config = Trainer.loss_config(p4g, p4g.kl_coef)
    assert loss_config.constant_tokens == p4g.max_model_len


# ---- 8. the training forward, the generators -----------------------------------------------------------


@pytest.mark.parametrize("chunk", [0, 4])
def test_the_training_forward_builds_no_kv_cache(chunk):
    model, tokenizer = tiny_chat_model(0)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=6), logprob_chunk=chunk)
    trace = policy.start_trace()
    view = [{"role": "user", "content": "Hello there"}]
    prompt = trace.next_prompt(view, None)
    (reply,) = policy.generate([prompt], [0])
    trace.record(reply.token_ids, reply.logprobs, len(view))
    caches = []
    module = policy.model.get_decoder()
    module.register_forward_hook(lambda _m, _a, output: caches.append(output.past_key_values))
    policy.model.train()
    policy.sequence_logprobs(trace.samples())
    assert caches == [None]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's generators need a GPU")
def test_a_checkpoint_restores_the_cuda_generators(tmp_path):
    trainer = trainer_for(tmp_path, "device=cuda", "steps=1", "eval_every=100")
    trainer.run(progress=False)
    saved = torch.cuda.get_rng_state_all()
    torch.cuda.manual_seed_all(12345)
    assert trainer._load_checkpoint(sorted((tmp_path / "checkpoints").glob("step-*"))[-1]) is None
    assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), saved))


# ---- 4. served adapters ----------------------------------------------------------------------------


def test_served_adapter_folders_keep_the_last_two_versions(tmp_path):
    from baselines.training.vllm_engine import ServedAdapters  # testable without vLLM: the folders only

    model, tokenizer = tiny_chat_model(0)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer), lora={"r": 2, "target_modules": ["q_proj"]})
    served = ServedAdapters(tmp_path)
    for version in range(1, 6):
        policy.save(served.folder("agent", version))
        served.prune("agent")
    policy.save(served.folder("user", 1))
    served.prune("user")
    assert sorted(p.name for p in (tmp_path / "agent").iterdir()) == ["v000004", "v000005"]
    assert (tmp_path / "agent" / "v000005" / "adapter_model.safetensors").is_file()
    assert [p.name for p in (tmp_path / "user").iterdir()] == ["v000001"]
