"""The trainer's equations on hand-built batches: advantages, loss, masks."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from baselines.training.advantages import RunningBaseline, curriculum_reward, dr_grpo, group_advantages, grpo  # noqa: E402
from baselines.training.loss import LossConfig, policy_loss  # noqa: E402

REWARDS = np.array([1.0, 0.0, 0.5, 0.5])


def test_grpo():
    mean, std = 0.5, np.sqrt(0.125)
    assert grpo(REWARDS) == pytest.approx((REWARDS - mean) / (std + 1e-6))
    assert group_advantages(REWARDS, "grpo", scale_std=False) == pytest.approx(REWARDS - mean)
    assert grpo(np.ones(4)) == pytest.approx(np.zeros(4))  # a zero-variance group teaches nothing


def test_dr_grpo():
    assert dr_grpo(REWARDS) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert group_advantages(REWARDS, "dr_grpo") == pytest.approx([0.5, -0.5, 0.0, 0.0])


def test_rae_baseline_per_role_and_simulator():
    baseline = RunningBaseline(decay=0.5)
    first = group_advantages(REWARDS, "rae", key=("agent", 0), baseline=baseline)
    assert first == pytest.approx(REWARDS - 0.5)  # first group: its own mean
    assert baseline.values[("agent", 0)] == pytest.approx(0.5)
    second = group_advantages(np.array([1.0, 1.0]), "rae", key=("agent", 0), baseline=baseline)
    assert second == pytest.approx([0.5, 0.5]) and baseline.values[("agent", 0)] == pytest.approx(0.75)
    other = group_advantages(np.array([0.0, 1.0]), "rae", key=("agent", 1), baseline=baseline)
    assert other == pytest.approx([-0.5, 0.5])  # another simulator has its own baseline
    with pytest.raises(ValueError, match="RunningBaseline"):
        group_advantages(REWARDS, "rae")


def test_none_and_unknown():
    assert group_advantages(REWARDS, "none") == pytest.approx(REWARDS)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        group_advantages(REWARDS, "ppo")


def test_curriculum_reward():
    assert curriculum_reward(np.array([0.0, 1.0, 0.0, 1.0])) == pytest.approx(1.0)  # variance 0.25: the target
    assert curriculum_reward(np.ones(4)) == pytest.approx(np.exp(-(0.25**2) / 0.02))


def batch():
    logprobs = torch.log(torch.tensor([[0.5, 0.6, 0.2], [0.3, 0.9, 0.4]]))
    old = torch.log(torch.tensor([[0.5, 0.4, 0.2], [0.2, 0.9, 0.4]]))
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    return logprobs, old, advantages, mask


def test_clipped_loss_matches_the_equation():
    logprobs, old, advantages, mask = batch()
    loss, stats = policy_loss(logprobs, old, advantages, mask, LossConfig(clip_low=0.2, clip_high=0.28))
    ratio = torch.exp(logprobs - old)
    # masked tokens: (0,1) ratio 1.5, A=+1 -> clipped to 1.28; (0,2) ratio 1 -> 1;
    # (1,0) ratio 1.5, A=-2 -> min(-3, -2.56) = -3; (1,1) ratio 1 -> -2
    expected = -(1.28 * 1 + 1.0 * 1 + 1.5 * -2 + 1.0 * -2) / 4
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert stats["clip_fraction"] == pytest.approx(0.25)  # only (0,1) is clipped (the pessimistic branch)
    assert float(ratio[0, 1]) == pytest.approx(1.5)


def test_aggregations_and_kl():
    logprobs, old, advantages, mask = batch()
    per_sequence, _ = policy_loss(logprobs, old, advantages, mask, LossConfig(aggregation="sequence_mean"))
    assert float(per_sequence) == pytest.approx(-(((1.28 + 1.0) / 2) + ((-3.0 - 2.0) / 2)) / 2, rel=1e-5)
    constant, _ = policy_loss(logprobs, old, advantages, mask, LossConfig(aggregation="constant", constant_tokens=10.0))
    # Dr. GRPO: each sequence's sum over the per-sequence budget, averaged over the 2 sequences
    assert float(constant) == pytest.approx(-(1.28 + 1.0 - 3.0 - 2.0) / (2 * 10), rel=1e-5)
    ref = logprobs - 0.1
    with_kl, stats = policy_loss(logprobs, old, advantages, mask, LossConfig(kl_coef=0.5), ref_logprobs=ref)
    k3 = np.exp(-0.1) + 0.1 - 1
    assert stats["kl"] == pytest.approx(k3, rel=1e-4)
    base, _ = policy_loss(logprobs, old, advantages, mask, LossConfig())
    assert float(with_kl) == pytest.approx(float(base) + 0.5 * k3, rel=1e-4)


def test_importance_correction_is_truncated():
    logprobs, old, advantages, mask = batch()
    behaviour = old - 2.0  # the engine thought these tokens far less likely: weight e^2, capped at 2
    corrected, _ = policy_loss(logprobs, old, advantages, mask, LossConfig(is_cap=2.0), behaviour_logprobs=behaviour)
    base, _ = policy_loss(logprobs, old, advantages, mask, LossConfig())
    assert float(corrected) == pytest.approx(2 * float(base), rel=1e-5)


def test_gradient_only_flows_through_masked_tokens():
    logprobs, old, advantages, mask = batch()
    logprobs = logprobs.clone().requires_grad_(True)
    loss, _ = policy_loss(logprobs, old, advantages, mask, LossConfig())
    loss.backward()
    assert torch.all(logprobs.grad[mask == 0] == 0)  # prompt and other-side tokens get no gradient
    assert float(logprobs.grad[0, 1]) == 0.0  # clipped: no gradient
    assert all(float(logprobs.grad[i, j]) != 0.0 for i, j in ((0, 2), (1, 0), (1, 1)))


def test_the_behaviour_gap_is_measured_where_the_mean_ratio_cannot_see_it():
    """Tokens sampled at temperature 0.7, scored at 0.5: E_q[p / q] = 1 whatever p is, so the mean
    ratio stays near 1; mean |log r| and the share outside the clip range do not."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4000, 50, generator=generator) * 2
    sampling = torch.log_softmax(logits / 0.7, -1)
    tokens = torch.multinomial(sampling.exp(), 1, generator=generator)
    behaviour = sampling.gather(-1, tokens).T
    scored = torch.log_softmax(logits / 0.5, -1).gather(-1, tokens).T
    mask, advantages = torch.ones_like(scored), torch.ones_like(scored)
    _, mismatched = policy_loss(scored, scored, advantages, mask, LossConfig(), behaviour_logprobs=behaviour)
    assert abs(float(torch.exp(scored - behaviour).mean()) - 1) < 0.05  # the check that could not fail
    assert mismatched["behaviour_log_ratio_abs"] > 0.1 and mismatched["behaviour_clip_fraction"] > 0.1
    _, agreeing = policy_loss(behaviour, behaviour, advantages, mask, LossConfig(), behaviour_logprobs=behaviour)
    assert agreeing["behaviour_log_ratio_abs"] == 0 and agreeing["behaviour_clip_fraction"] == 0


def test_the_k3_gradient_is_that_of_the_reverse_kl():
    """Exactly, over a 6-token vocabulary: E_{x ~ pi}[grad k3(x)] = grad KL(ref || pi), not grad KL(pi || ref)."""
    theta = torch.randn(6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    ref = torch.log_softmax(torch.randn(6, generator=torch.Generator().manual_seed(2)), -1)
    logp = torch.log_softmax(theta, -1)
    log_ratio = ref - logp
    k3 = torch.exp(log_ratio) - log_ratio - 1
    (expected_grad,) = torch.autograd.grad((logp.exp().detach() * k3).sum(), theta, retain_graph=True)
    (reverse,) = torch.autograd.grad((ref.exp() * (ref - logp)).sum(), theta, retain_graph=True)
    (forward,) = torch.autograd.grad((logp.exp() * (logp - ref)).sum(), theta)
    torch.testing.assert_close(expected_grad, reverse)
    assert not torch.allclose(expected_grad, forward, atol=1e-3)
