"""TorchRL IPPO on both sides of the act-level testbed: the persuader and the persuadee, one policy each.

    python examples/torchrl_ippo.py --frames 20000

TorchRL's own `PettingZooWrapper` takes the PettingZoo env as made (arrays, numeric infos with an
ndarray `action_mask`); `action_mask=True` here moves each side's allowed acts into its observation
(all ones for the side that is not to speak, whose act the env ignores). Each side is
its own group, with a masked categorical actor and a critic, trained by `ClipPPOLoss` on GAE
advantages: independent PPO, the sides co-trained against each other.
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs.libs.pettingzoo import PettingZooWrapper
from torchrl.modules import MLP, MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss, ValueEstimators

from scope_envs.persuasion_acts import parallel_env


def make_env(seed: int) -> PettingZooWrapper:
    env = parallel_env(action_mask=True)
    return PettingZooWrapper(env, categorical_actions=True, use_mask=True, seed=seed)


def side_modules(env: PettingZooWrapper, group: str) -> tuple[ProbabilisticActor, ValueOperator]:
    observation = (group, "observation", "observation")
    width = env.observation_spec[observation].shape[-1]
    acts = env.full_action_spec[group, "action"].space.n
    logits = TensorDictModule(
        MLP(in_features=width, out_features=acts, num_cells=[64, 64], activation_class=nn.Tanh),
        in_keys=[observation],
        out_keys=[(group, "logits")],
    )
    actor = ProbabilisticActor(
        logits,
        in_keys={"logits": (group, "logits"), "mask": (group, "action_mask")},
        out_keys=[(group, "action")],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
        log_prob_key=(group, "sample_log_prob"),
    )
    critic = ValueOperator(
        MLP(in_features=width, out_features=1, num_cells=[64, 64], activation_class=nn.Tanh),
        in_keys=[observation],
        out_keys=[(group, "state_value")],
    )
    return actor, critic


def train(frames: int, seed: int = 0, frames_per_batch: int = 1000, epochs: int = 4) -> dict[str, float]:
    """Trains both sides; returns each side's mean reward per finished episode in the last batch."""
    torch.manual_seed(seed)
    env = make_env(seed)
    groups = list(env.group_map)
    modules = {group: side_modules(env, group) for group in groups}
    losses, optimizers = {}, {}
    for group, (actor, critic) in modules.items():
        loss = ClipPPOLoss(actor_network=actor, critic_network=critic, entropy_coeff=0.01, normalize_advantage=True)
        loss.set_keys(
            reward=(group, "reward"),
            action=(group, "action"),
            sample_log_prob=(group, "sample_log_prob"),
            value=(group, "state_value"),
            advantage=(group, "advantage"),
            value_target=(group, "value_target"),
            done=(group, "done"),
            terminated=(group, "terminated"),
        )
        loss.make_value_estimator(ValueEstimators.GAE, gamma=1.0, lmbda=0.95)
        losses[group], optimizers[group] = loss, torch.optim.Adam(loss.parameters(), lr=3e-4)
    policy = TensorDictSequential(*(actor for actor, _ in modules.values()))
    collector = Collector(
        env, policy, frames_per_batch=frames_per_batch, total_frames=frames, auto_register_policy_transforms=False
    )
    last: dict[str, float] = {}
    for data in collector:
        ended = data["next", "done"].squeeze(-1)
        for group in groups:
            loss = losses[group]
            with torch.no_grad():
                loss.value_estimator(
                    data, params=loss.critic_network_params, target_params=loss.target_critic_network_params
                )
            for _ in range(epochs):
                terms = loss(data)
                total = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
                optimizers[group].zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optimizers[group].step()
            rewards = data["next", group, "reward"].reshape(len(ended), -1)[ended]
            last[group] = float(rewards.mean()) if len(rewards) else float("nan")
    collector.shutdown()
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for group, reward in train(args.frames, args.seed).items():
        print(f"{group}: mean reward per finished episode in the last batch {reward:.3f}")


if __name__ == "__main__":
    main()
