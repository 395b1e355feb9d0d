"""`ActPolicy`: a trainable linear softmax policy over one side's discrete acts.

For any env whose side has a `Discrete` action space and a `features` vector in its observation.
The trainer updates it with the same loss code as a language model: a sample is an episode's
acts as a "token" sequence (`ActSample`, one position per turn, with the features and the allowed
acts of that turn), and `sequence_logprobs` recomputes their log-probabilities differentiably.
Rollouts call `act(features, mask, rng)` on a whole batch of episodes at once.

Specs: `linear` (zero-initialised: uniform over the acts), or any policy spec whose policy is
itself linear (it has `linear_weights()`, e.g. a simulator family of an act-level benchmark): the
trainable policy then starts as exactly that policy, so co-training begins from the very simulator
a single-simulator run trains against.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.core.rollout import ActSample
from scope_envs.core.sampling import log_softmax, sample_rows
from scope_envs.core.specs import check_spec, make_policy

WEIGHTS_FILE = "policy.pt"


class ActPolicy:
    def __init__(
        self, n_features: int, n_acts: int, *, temperature: float = 1.0, weights: np.ndarray | None = None
    ) -> None:
        import torch

        # float64: a last-bit difference between CPUs' kernels stays far below what flips a sampled act
        self.model = torch.nn.Linear(n_features, n_acts, bias=False, dtype=torch.float64)
        with torch.no_grad():
            self.model.weight.copy_(torch.zeros(n_acts, n_features) if weights is None else torch.tensor(weights))
        self.temperature = temperature
        self.engine: Any = None  # generation is the model itself
        self._reference: Any = None

    def trainable_parameters(self) -> list[Any]:
        return list(self.model.parameters())

    def freeze_reference(self) -> None:
        """Keeps the current weights as the reference of a KL penalty."""
        self._reference = copy.deepcopy(self.model).eval().requires_grad_(False)

    def reference_logprobs(self, samples: Sequence[ActSample]) -> Any:
        import torch

        live, self.model = self.model, self._reference
        try:
            with torch.no_grad():
                return self.sequence_logprobs(samples)[0]
        finally:
            self.model = live

    def act(self, features: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sampled acts for a batch and their log-probabilities."""
        return sample_rows(self._log_distribution(features, mask), rng)

    def act_distribution(self, features: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The probabilities `act` draws each allowed act with, `[N, acts]` (0 where not allowed)."""
        return np.exp(self._log_distribution(features, mask))

    def _log_distribution(self, features: np.ndarray, mask: np.ndarray) -> np.ndarray:
        weights = self.model.weight.detach().cpu().numpy()
        return log_softmax(features @ weights.T / self.temperature, mask)

    def sequence_logprobs(self, samples: Sequence[ActSample]) -> tuple[Any, Any, Any]:
        """`[batch, turns]` log-probs of the acts taken, the mask of real turns, and the entropies."""
        import torch

        turns = max(len(s.ids) - 1 for s in samples)
        width, acts = samples[0].features.shape[1], samples[0].allowed.shape[1]
        features = np.zeros((len(samples), turns, width))
        allowed = np.ones((len(samples), turns, acts), bool)
        taken = np.zeros((len(samples), turns), np.int64)
        mask = np.zeros((len(samples), turns))
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
    """An `ActPolicy` for `side` of `env` (see the module docstring for specs)."""
    from gymnasium import spaces

    observation, actions = env.observation_space(side), env.action_space(side)
    if isinstance(observation, spaces.Dict):
        observation = observation.spaces.get("features", observation.spaces.get("observation", observation))
    flat_box = isinstance(observation, spaces.Box) and len(observation.shape) == 1
    act_level = isinstance(actions, spaces.Discrete) and flat_box
    if spec != "linear":  # a typo is an unknown spec, not "a linear act policy"
        check_spec(spec, env=env, also=("linear",) if act_level else ("tiny",))
    if not act_level:
        raise ValueError(
            f"policy {spec!r} is a linear act policy: it needs an env whose {side!r} side has Discrete actions "
            f"and a 'features' vector in its observation; {type(env).__name__} has {actions} and {observation}"
        )
    n_features, n_acts = observation.shape[0], int(actions.n)
    if spec == "linear":
        return ActPolicy(n_features, n_acts, temperature=temperature)
    start = make_policy(spec, env=env, side=side)
    if not hasattr(start, "linear_weights"):
        raise ValueError(f"unknown act-level policy {spec!r}: use 'linear', or a spec of a linear policy to start from")
    weights = np.asarray(start.linear_weights(), dtype=float)
    if weights.shape != (n_acts, n_features):
        raise ValueError(
            f"{spec!r} has weights of shape {weights.shape}; the {side!r} side needs {(n_acts, n_features)}"
        )
    # logits / temperature = W x: the policy starts as exactly `start`
    return ActPolicy(n_features, n_acts, temperature=temperature, weights=temperature * weights)
