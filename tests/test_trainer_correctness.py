"""Regression tests for the trainer's correctness: precision, log-prob agreement, gradient
accumulation, the curriculum simulator's gradient, resume and the generation engine, the KL
estimator, held-out evaluation, the live simulator's share, and LoRA memory (one base, no copies)."""

import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from training_helpers import TINY_P4G  # noqa: E402

from baselines.training.config import load_config  # noqa: E402
from baselines.training.loss import LossConfig, policy_loss  # noqa: E402
from baselines.training.policy import LMPolicy  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402
from scope_envs.core.dialogue import AGENT, USER  # noqa: E402
from scope_envs.core.rollout import Sample  # noqa: E402
from sims.hf_backend import HFSimulator  # noqa: E402
from sims.opponents import LIVE, Population  # noqa: E402
from sims.pool import CheckpointPool  # noqa: E402
from sims.testing import tiny_chat_model  # noqa: E402

LORA = "lora={r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj]}"
BASE = [*TINY_P4G, "tensorboard=false"]


def trainer_for(tmp_path: Path, *overrides: str) -> Trainer:
    return Trainer(load_config(None, [*BASE, f"output_dir={tmp_path}", *overrides]))


def train_episodes(trainer: Trainer, step: int = 0):
    players, labels = trainer.players(step, trainer.config.groups_per_step)
    episodes = trainer.collect(step, group_size=trainer.config.group_size, split="train", players=players)
    return episodes, labels


def gradients(policy) -> list:
    return [p.grad.detach().clone() for p in policy.model.parameters() if p.grad is not None]


# ---- gradient accumulation ----------------------------------------------------------------------


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "constant"])
def test_accumulated_micro_batches_give_the_full_batch_gradient(tmp_path, aggregation):
    # lr 0: the update leaves the weights as they are and its accumulated gradient in .grad
    trainer = trainer_for(tmp_path, f"aggregation={aggregation}", "lr=0", "grad_clip=1.0e9", "advantage=none")
    episodes, labels = train_episodes(trainer)
    learner = trainer.learners[AGENT]
    results = []
    for micro_batch in (1, 2, 1000):
        trainer.config.micro_batch = micro_batch
        trainer.update(learner, episodes, [0, 1], labels)
        results.append(gradients(learner.policy))
    full = results[-1]
    assert any(float(g.abs().sum()) > 0 for g in full)
    for accumulated in results[:-1]:
        for a, b in zip(accumulated, full):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


# ---- precision --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "lora"), [("float32", False), ("bfloat16", False), ("float32", True), ("bfloat16", True)]
)
def test_one_step_at_a_small_learning_rate_moves_every_trained_parameter(tmp_path, dtype, lora):
    settings = [f"dtype={dtype}", "lr=1.0e-6", "advantage=none", "steps=1", "eval_every=100"]
    trainer = trainer_for(tmp_path, *settings, *([LORA] if lora else []))
    policy = trainer.learners[AGENT].policy
    trained = policy.trainable_parameters()
    assert trained and all(p.dtype == torch.float32 for p in trained)  # master weights / adapters in float32
    if lora:
        frozen = [p for p in policy.model.parameters() if not p.requires_grad]
        assert frozen and all(p.dtype == getattr(torch, dtype) for p in frozen)  # the base in `dtype`
    before = [p.detach().clone() for p in trained]
    episodes, labels = train_episodes(trainer)
    trainer.update(trainer.learners[AGENT], episodes, [0, 1], labels)
    moved = touched = 0
    for old, parameter in zip(before, trained):
        has_gradient = parameter.grad.abs() > 1e-6  # well above AdamW eps: a step of about lr is due
        touched += int(has_gradient.sum())
        moved += int(((parameter.detach() != old) & has_gradient).sum())
    assert touched > 0 and moved == touched  # no update of 1e-6 is rounded away


@pytest.mark.parametrize("lora", [False, True])
def test_bfloat16_generation_and_training_log_probs_agree_at_step_zero(lora):
    model, tokenizer = tiny_chat_model(3)
    simulator = HFSimulator(model, tokenizer=tokenizer, max_new_tokens=16)
    policy = LMPolicy(
        simulator, dtype="bfloat16", lora={"r": 4, "target_modules": ["q_proj", "v_proj"]} if lora else None
    )
    trace = policy.start_trace()
    view = [{"role": "system", "content": "You persuade."}, {"role": "user", "content": "Hello there, who are you?"}]
    prompt = trace.next_prompt(view, None)
    (reply,) = policy.generate([prompt], [5])
    trace.record(reply.token_ids, reply.logprobs, len(view))
    (sample,) = trace.samples()
    logprobs, mask, _ = policy.sequence_logprobs([sample])
    sampled = torch.tensor(sample.logprobs[1:])
    ratio = torch.exp(logprobs[0] - sampled)[mask[0] == 1]
    assert len(ratio) > 0
    # one definition (softmax(logits / T) in float32 over bfloat16 compute) in both: ratio 1 up to
    # bfloat16's cached-vs-full-forward noise
    assert float((ratio - 1).abs().mean()) < 0.02


# ---- the curriculum simulator ------------------------------------------------------------------------


def test_the_curriculum_simulator_gets_a_gradient(tmp_path):
    trainer = trainer_for(
        tmp_path, "method=cotrain", "simulator_reward=curriculum", "lr=0", "grad_clip=1.0e9", "group_size=2"
    )
    episodes, labels = train_episodes(trainer)
    # group 0: agent rewards 1 and 0 (variance 0.25, curriculum reward 1); group 1: 1 and 1 (variance 0)
    for episode, reward in zip(sorted(episodes, key=lambda e: e.group), [1.0, 0.0, 1.0, 1.0]):
        episode.rewards[AGENT] = reward
    simulator = trainer.learners[USER]
    stats = trainer.update(simulator, episodes, [0, 1], labels)
    assert stats["grad_norm"] > 0  # a group baseline would give every simulator turn an advantage of 0


# ---- resume and the generation engine ------------------------------------------------------------------


class CopyEngine:
    """A generation engine at the trainer's boundary (`sync(policy)`, `generate(prompts, seeds, budgets)`):
    it generates with its own copy of the weights, which only `sync` refreshes, as vLLM does."""

    def __init__(self, policy: LMPolicy) -> None:
        model, tokenizer = tiny_chat_model(0)
        self.simulator = HFSimulator(model, tokenizer=tokenizer, max_new_tokens=policy.simulator.max_new_tokens)
        self.syncs = 0

    def sync(self, policy: LMPolicy) -> None:
        model = policy.model if isinstance(policy, LMPolicy) else policy
        self.simulator.model.load_state_dict(model.state_dict())
        self.syncs += 1

    def generate(self, prompts, seeds, budgets=None):
        return self.simulator.generate(prompts, seeds, budgets)

    def weights(self) -> list:
        return [p.detach().clone() for p in self.simulator.model.parameters()]


def test_resume_serves_the_restored_weights_to_the_generation_engine(tmp_path):
    settings = ["steps=2", "checkpoint_every=1", "eval_every=100", "lr=0.01"]
    first = trainer_for(tmp_path, *settings)
    engine = CopyEngine(first.learners[AGENT].policy)
    first.learners[AGENT].policy.engine = engine
    engine.sync(first.learners[AGENT].policy)
    first.run(progress=False)
    trained = [p.detach().clone() for p in first.learners[AGENT].policy.model.parameters()]

    again = trainer_for(tmp_path, *settings)
    policy = again.learners[AGENT].policy
    fresh_engine = CopyEngine(policy)
    policy.engine = fresh_engine
    fresh_engine.sync(policy)  # serves the initial weights, as a new engine does
    initial = fresh_engine.weights()
    again.run(resume=True, progress=False)
    served = fresh_engine.weights()
    assert any(not torch.equal(a, b) for a, b in zip(initial, trained))
    for a, b in zip(served, trained):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---- smaller defects ---------------------------------------------------------------------------------


def test_the_k3_kl_estimate_stays_finite_for_large_log_ratios():
    logprobs = torch.tensor([[-200.0, -0.1]], requires_grad=True)
    reference = torch.tensor([[-0.1, -200.0]])
    config = LossConfig(kl_coef=0.1)
    loss, stats = policy_loss(
        logprobs,
        logprobs.detach(),
        torch.zeros_like(logprobs),
        torch.ones_like(logprobs),
        config,
        ref_logprobs=reference,
    )
    loss.backward()
    assert math.isfinite(float(loss)) and math.isfinite(stats["kl"])
    assert torch.isfinite(logprobs.grad).all()


def test_generation_runs_in_batches_of_the_configured_size():
    model, tokenizer = tiny_chat_model(0)
    simulator = HFSimulator(model, tokenizer=tokenizer, max_new_tokens=3)
    policy = LMPolicy(simulator, generation_batch=2)
    sizes = []
    generate = simulator.generate
    simulator.generate = lambda prompts, seeds, budgets: sizes.append(len(prompts)) or generate(prompts, seeds, budgets)
    prompt = simulator.render([{"role": "user", "content": "hi"}])
    replies = policy.generate([prompt] * 5, list(range(5)))
    assert len(replies) == 5 and sizes == [2, 2, 1]


@pytest.mark.parametrize("lora", [None, {"r": 4, "target_modules": ["q_proj"]}])
def test_the_output_head_reads_only_the_positions_of_trained_tokens(lora):
    model, tokenizer = tiny_chat_model(0)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=6), lora=lora)
    samples = [
        Sample([5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 0, 1], [0.0, 0.0, -1.0, -1.0, 0.0, -1.0], 2),
        Sample([5, 6, 11, 12], [0, 0, 0, 1], [0.0, 0.0, 0.0, -1.0], 3),
    ]
    rows_read = []
    head = policy.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, inputs, output: rows_read.append(inputs[0].shape[0]))
    try:
        logprobs, mask, _ = policy.sequence_logprobs(samples)
    finally:
        hook.remove()
    assert rows_read == [4]  # the four trained tokens, no prompt position, no padding
    assert bool((logprobs[mask == 0] == 0).all()) and bool((logprobs[mask == 1] < 0).all())


def test_entropies_carry_no_autograd_graph():
    model, tokenizer = tiny_chat_model(0)
    trace_policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=4))
    trace = trace_policy.start_trace()
    view = [{"role": "user", "content": "hi"}]
    (reply,) = trace_policy.generate([trace.next_prompt(view, None)], [0])
    trace.record(reply.token_ids, reply.logprobs, 1)
    logprobs, _, entropy = trace_policy.sequence_logprobs(trace.samples())
    assert logprobs.requires_grad and not entropy.requires_grad and entropy.grad_fn is None


@pytest.mark.parametrize("chunk", [0, 3])
def test_chunked_log_probs_match_the_whole_computation(chunk):
    model, tokenizer = tiny_chat_model(1)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, max_new_tokens=12), logprob_chunk=0)
    trace = policy.start_trace()
    view = [{"role": "user", "content": "tell me about the children"}]
    (reply,) = policy.generate([trace.next_prompt(view, None)], [1])
    trace.record(reply.token_ids, reply.logprobs, 1)
    samples = trace.samples()
    whole, mask, whole_entropy = policy.sequence_logprobs(samples)
    policy.logprob_chunk = chunk
    chunked, _, chunked_entropy = policy.sequence_logprobs(samples)
    torch.testing.assert_close(chunked * mask, whole * mask)
    torch.testing.assert_close(chunked_entropy * mask, whole_entropy * mask)
    chunked.sum().backward()  # differentiable through the recomputed chunks
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())


def test_the_held_out_set_is_the_same_at_every_evaluation(tmp_path):
    trainer = trainer_for(tmp_path)
    played = []
    collect = trainer.collect

    def recording_collect(step, **kwargs):
        episodes = collect(step, **kwargs)
        played.append(sorted(e.scenario_id for e in episodes))
        return episodes

    trainer.collect = recording_collect
    first, later = trainer.evaluate(5), trainer.evaluate(10)
    assert played[0] == played[1] and first == later


def test_the_live_simulator_plays_its_minimum_share_of_every_step(tmp_path):
    pool = CheckpointPool(tmp_path / "pool", max_size=4, loader=lambda path: path.name)
    for step in range(4):
        pool.add(lambda directory: Path(directory).mkdir(parents=True, exist_ok=True), step=step)
    population = Population(pool, "LIVE", seed=0, min_live_share=0.25, groups=4)
    shares = [sum(population.pick(step, g)[0] == LIVE for g in range(4)) / 4 for step in range(200)]
    assert min(shares) >= 0.25
    assert np.mean(shares) > 0.25  # the other groups are still drawn over the whole pool, live included


# ---- LoRA memory: one base, no copies ------------------------------------------------------------------


def test_lora_reference_is_the_base_with_adapters_disabled(tmp_path):
    trainer = trainer_for(tmp_path, LORA, "kl_coef=0.1", "lr=0.05", "advantage=none")
    policy = trainer.learners[AGENT].policy
    assert policy._reference is None  # no copy of the model
    episodes, labels = train_episodes(trainer)
    samples = [s for e in episodes for s in e.samples[AGENT]][:2]
    before = policy.reference_logprobs(samples)
    with torch.no_grad():
        live_before = policy.sequence_logprobs(samples)[0]
    torch.testing.assert_close(before, live_before)  # peft's LoRA B starts at zero: the base is the policy
    for _ in range(2):
        trainer.update(trainer.learners[AGENT], episodes, [0, 1], labels)
    with torch.no_grad():
        live_after = policy.sequence_logprobs(samples)[0]
    torch.testing.assert_close(policy.reference_logprobs(samples), before)
    assert not torch.allclose(live_after, before)


def test_co_trained_lora_sides_share_one_base_and_train_their_own_adapter(tmp_path):
    trainer = trainer_for(tmp_path, LORA, "method=cotrain", "lr=0.05", "group_size=2", "advantage=none")
    agent, simulator = trainer.learners[AGENT].policy, trainer.learners[USER].policy
    assert agent.model is simulator.model
    agent_ids = {id(p) for p in agent.trainable_parameters()}
    simulator_ids = {id(p) for p in simulator.trainable_parameters()}
    assert agent_ids and simulator_ids and not agent_ids & simulator_ids
    frozen = [p for n, p in agent.model.named_parameters() if "lora_" not in n]
    base_before = [p.detach().clone() for p in frozen]
    simulator_before = [p.detach().clone() for p in simulator.trainable_parameters()]
    trainer.run(progress=False)
    assert all(torch.equal(a, p) for a, p in zip(base_before, frozen))  # the base never trains
    assert any(not torch.equal(a, p) for a, p in zip(simulator_before, simulator.trainable_parameters()))
    checkpoint = tmp_path / "checkpoints" / f"step-{trainer.step:06d}"
    for side in (AGENT, USER):  # each side's adapter saved alone, where peft loads it from
        assert (checkpoint / side / "policy" / "adapter_model.safetensors").is_file()


def test_population_snapshots_are_adapters_on_the_resident_base(tmp_path):
    trainer = trainer_for(
        tmp_path,
        LORA,
        "method=population",
        "pool_every=1",
        "pool_size=2",
        "steps=3",
        "groups_per_step=4",
        "group_size=2",
        "live_min_share=0.25",
    )
    built = []
    build = trainer._build_policy
    trainer._build_policy = lambda *a, **k: built.append(a) or build(*a, **k)
    records = trainer.run(progress=False)
    assert built == []  # no model was built for a snapshot
    assert any(key.startswith("pool/agent_reward/snapshot@") for r in records for key in r)
    assert all(r["pool/live_share"] >= 0.25 for r in records)
    live = trainer.learners[USER].policy
    assert set(live.model.peft_config) == {AGENT, USER}  # snapshots unloaded after each step
