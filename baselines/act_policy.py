"""`ActPolicy`: a trainable softmax policy over one side's acts, for vectorized act-level envs.

The trainer updates it with the same loss code as a language model: a sample is an episode's
acts as a "token" sequence (`ActSample`, one position per turn, with the features and the allowed
acts of that turn), and `sequence_logprobs` recomputes their log-probabilities differentiably.
Rollouts call `act(features, mask, rng)` on a whole batch of episodes at once.

Specs: `linear` (zero-initialised: uniform over the acts) for either side; for the persuadee,
`family:F[@GAMMA]` starts from simulator family F sharpened by GAMMA, so co-training begins from
exactly the simulator a single-simulator run trains against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from baselines.traces import Sample
from scope_envs.persuasion_acts.model import log_softmax
from sims.persuasion_acts import sample_rows

WEIGHTS_FILE = "policy.pt"


@dataclass(frozen=True)
class ActSample(Sample):
    """`ids` are `[0, act_1, ..., act_T]` (position 0 is the empty prompt); `features[t]` and
    `allowed[t]` are what act `t + 1` was chosen from."""

    features: np.ndarray = None  # type: ignore[assignment]
    allowed: np.ndarray = None  # type: ignore[assignment]


class ActPolicy:
    def __init__(
        self, n_features: int, n_acts: int, *, temperature: float = 1.0, weights: np.ndarray | None = None
    ) -> None:
        import torch

        self.model = torch.nn.Linear(n_features, n_acts, bias=False)
        with torch.no_grad():
            self.model.weight.copy_(torch.zeros(n_acts, n_features) if weights is None else torch.tensor(weights))
        self.temperature = temperature
        self.engine: Any = None  # generation is the model itself

    def act(self, features: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sampled acts for a batch and their log-probabilities."""
        weights = self.model.weight.detach().cpu().numpy().astype(float)
        return sample_rows(log_softmax(features @ weights.T / self.temperature, mask), rng)

    def sequence_logprobs(self, samples: Sequence[ActSample]) -> tuple[Any, Any, Any]:
        """`[batch, turns]` log-probs of the acts taken, the mask of real turns, and the entropies."""
        import torch

        turns = max(len(s.ids) - 1 for s in samples)
        width, acts = samples[0].features.shape[1], samples[0].allowed.shape[1]
        features = np.zeros((len(samples), turns, width), np.float32)
        allowed = np.ones((len(samples), turns, acts), bool)
        taken = np.zeros((len(samples), turns), np.int64)
        mask = np.zeros((len(samples), turns), np.float32)
        for row, sample in enumerate(samples):
            n = len(sample.ids) - 1
            features[row, :n], allowed[row, :n] = sample.features, sample.allowed
            taken[row, :n], mask[row, :n] = sample.ids[1:], sample.mask[1:]
        logits = self.model(torch.from_numpy(features)) / self.temperature
        logits = logits.masked_fill(~torch.from_numpy(allowed), float("-inf"))
        logp_all = torch.log_softmax(logits, dim=-1)
        logprobs = logp_all.gather(-1, torch.from_numpy(taken)[..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all.masked_fill(~torch.from_numpy(allowed), 0.0)).sum(-1).detach()
        return logprobs, torch.from_numpy(mask), entropy

    def save(self, directory: Path) -> None:
        import torch

        Path(directory).mkdir(parents=True, exist_ok=True)
        torch.save(self.model.state_dict(), Path(directory) / WEIGHTS_FILE)

    def load_weights(self, directory: Path) -> None:
        import torch

        self.model.load_state_dict(torch.load(Path(directory) / WEIGHTS_FILE, weights_only=True))


def build_act_policy(spec: str, *, env: Any, side: str, temperature: float) -> ActPolicy:
    """An `ActPolicy` for `side` of the vectorized env `env` (see the module docstring for specs)."""
    from scope_envs.core.dialogue import USER
    from scope_envs.persuasion_acts.model import AGENT_FEATURES, USER_FEATURES
    from sims.persuasion_acts import make_family

    if env is None or not getattr(env, "vectorized", False):
        raise ValueError(f"policy {spec!r} is an act-level policy: it needs an act-level env such as PersuasionActs")
    n_features, n_acts = env.observation_space(side)["features"].shape[0], env.action_space(side).n
    if spec == "linear":
        return ActPolicy(n_features, n_acts, temperature=temperature)
    if spec.startswith("family:") and side == USER:
        family = make_family(spec.removeprefix("family:"))
        if family.k is not None:
            raise ValueError(f"{spec!r}: a trainable simulator samples plainly; drop the /vs option")
        assert n_features == len(USER_FEATURES) and n_acts == family.weights.shape[0]
        # logits / temperature = gamma * W_f x: the policy starts as exactly this simulator
        weights = temperature * family.gamma * family.weights
        return ActPolicy(n_features, n_acts, temperature=temperature, weights=weights)
    assert n_features in (len(AGENT_FEATURES), len(USER_FEATURES))
    raise ValueError(f"unknown act-level policy {spec!r}: use 'linear', or 'family:F[@GAMMA]' for the user side")
