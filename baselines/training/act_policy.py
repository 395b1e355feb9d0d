"""`ActPolicy`: a trainable linear softmax policy over one side's discrete acts.

For any env whose side has a `Discrete` action space and a `features` vector in its observation.
The trainer updates it with the same loss code as a language model: a sample is an episode's
acts as a "token" sequence (`ActSample`, one position per turn, with the features and the allowed
acts of that turn), and `sequence_logprobs` recomputes their log-probabilities differentiably.
Rollouts call `act(features, mask, rng)` on a whole batch of episodes at once.

Specs: `linear` (zero-initialised: uniform over the acts), or any policy spec whose policy is
itself linear (it has `linear_weights()`, e.g. a simulator family of an act-level benchmark): the
trainable policy then starts as exactly that policy, so co-training begins from the very simulator
a single-simulator run trains against. A policy that is linear per type (`typed_linear_weights()`:
weights per type and how a row's type is read from its features, as a family of a typed
population) starts a typed policy, one weight matrix per type: every type of it, not its modal one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.core.rollout import ActSample
from scope_envs.core.sampling import log_softmax, sample_rows
from scope_envs.core.specs import check_spec, make_policy

WEIGHTS_FILE = "policy.pt"


def _typed_linear(types: int, n_features: int, n_acts: int) -> Any:
    """One linear map per type: row `n` of `forward(features, types)` uses `weight[types[n]]`."""
    import torch

    class TypedLinear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(types, n_acts, n_features, dtype=torch.float64))

        def forward(self, features: Any, kinds: Any) -> Any:
            return torch.einsum("...f,...af->...a", features, self.weight[kinds])

    return TypedLinear()


class ActPolicy:
    """`type_of` (optional) reads each row's type from its features: the policy then has one weight
    matrix per type (`weights` `[types, acts, features]`), as a simulator of typed persuadees does."""

    def __init__(
        self,
        n_features: int,
        n_acts: int,
        *,
        temperature: float = 1.0,
        weights: np.ndarray | None = None,
        type_of: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        import torch

        self.type_of = type_of
        # float64: a last-bit difference between CPUs' kernels stays far below what flips a sampled act
        if type_of is None:
            self.model = torch.nn.Linear(n_features, n_acts, bias=False, dtype=torch.float64)
        else:
            self.model = _typed_linear(len(weights), n_features, n_acts)
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
        if self.type_of is None:
            return log_softmax(features @ weights.T / self.temperature, mask)
        logits = np.einsum("nf,naf->na", features, weights[self.type_of(features)])
        return log_softmax(logits / self.temperature, mask)

    def _logits(self, features: np.ndarray) -> Any:
        import torch

        if self.type_of is None:
            return self.model(torch.from_numpy(features))
        kinds = self.type_of(features.reshape(-1, features.shape[-1])).reshape(features.shape[:-1])
        return self.model(torch.from_numpy(features), torch.from_numpy(np.asarray(kinds, np.int64)))

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
        logits = self._logits(features) / self.temperature
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
    typed = start.typed_linear_weights() if hasattr(start, "typed_linear_weights") else None
    if typed is not None:  # one weight matrix per type, the type read from the features as `start` reads it
        weights, type_of = typed
        if weights.shape[1:] != (n_acts, n_features):
            raise ValueError(f"{spec!r} has weights of shape {weights.shape[1:]} per type; need {(n_acts, n_features)}")
        return ActPolicy(n_features, n_acts, temperature=temperature, weights=temperature * weights, type_of=type_of)
    weights = np.asarray(start.linear_weights(), dtype=float)
    if weights.shape != (n_acts, n_features):
        raise ValueError(
            f"{spec!r} has weights of shape {weights.shape}; the {side!r} side needs {(n_acts, n_features)}"
        )
    # logits / temperature = W x: the policy starts as exactly `start`
    return ActPolicy(n_features, n_acts, temperature=temperature, weights=temperature * weights)
