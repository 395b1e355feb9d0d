"""`PersuasionActsVectorEnv`: the agent view of the testbed for `num_envs` episodes at once.

What `gymnasium.make_vec("scope/PersuasionActs-v0", num_envs=N, vectorization_mode="vector_entry_point")`
builds: one `ActsBatch` of N episodes, the persuadee played by a vectorized simulator
(`act(features, mask, rng)`, as simulator families have) for all of them in one call. Episodes,
rewards and observations are those of `gymnasium.make("scope/PersuasionActs-v0", obs="features")`;
finished episodes restart on the next step (Gymnasium's next-step autoreset). The scenario and the
simulator's draws come from the vector env's own generator, so a seed reproduces the whole batch,
but not the episodes the one-at-a-time view plays with the same seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.registration import find_env
from scope_envs.core.seeding import derive_seed
from scope_envs.core.specs import resolve_policy
from scope_envs.persuasion_acts.engine import ActsBatch
from scope_envs.persuasion_acts.env import PERSONAS_PER_SPLIT, PersuasionActsEnv

ENTRY_POINT = "scope_envs.persuasion_acts.env:PersuasionActsEnv"


class PersuasionActsVectorEnv(VectorEnv):
    """See the module docstring. `simulator`: a spec (`"family:3@2.5"`) or a simulator with `act`."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        num_envs: int = 1,
        *,
        simulator: Any = None,
        obs: str = "features",
        action_mask: bool = False,
        split: str = "train",
        env: str = ENTRY_POINT,
        **env_kwargs: Any,
    ) -> None:
        defaults = {} if env == ENTRY_POINT else find_env(env).kwargs  # a registered version's (version 1 or 2)
        if env != ENTRY_POINT and find_env(env).entry_point != ENTRY_POINT:
            raise ValueError(f"PersuasionActsVectorEnv batches {ENTRY_POINT}, not {env!r}")
        if obs != "features":
            raise ValueError(
                f"the vector env batches arrays: obs must be 'features', got {obs!r}; for text, use "
                "gymnasium.make_vec(..., vectorization_mode='sync') or scope_envs.core.vector.ThreadVectorEnv"
            )
        if split not in PERSONAS_PER_SPLIT:
            raise ValueError(f"split must be one of {sorted(PERSONAS_PER_SPLIT)}, got {split!r}")
        if num_envs < 1:
            raise ValueError("num_envs must be at least 1")
        self.template = PersuasionActsEnv(obs="features", action_mask=action_mask, **{**defaults, **env_kwargs})
        self.simulator = resolve_policy("scripted" if simulator is None else simulator, env=self.template, side=USER)
        if not hasattr(self.simulator, "act"):
            raise TypeError(
                f"{getattr(self.simulator, 'name', type(self.simulator).__name__)} cannot play a batch: the vector "
                "env needs a simulator with a vectorized act(features, mask, rng), as simulator families have"
            )
        self.num_envs, self.split, self.mask_in_obs = num_envs, split, bool(action_mask)
        self.single_observation_space = self.template.observation_space(AGENT)
        self.single_action_space = self.template.action_space(AGENT)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.batch = ActsBatch(
            np.zeros((num_envs, self.template.personas["train"].shape[1])), self.template.exchanges, self.template.rules
        )
        self._autoreset = np.zeros(num_envs, bool)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if isinstance(seed, list):  # one seed per env, as SyncVectorEnv takes: they seed one generator
            seed = derive_seed(*seed)
        super().reset(seed=seed)
        options = dict(options or {})
        split = options.pop("split", self.split)
        if split not in PERSONAS_PER_SPLIT:
            raise ValueError(f"split must be one of {sorted(PERSONAS_PER_SPLIT)}, got {split!r}")
        if options:
            raise ValueError(f"the vector env's reset takes options={{'split': ...}} only, got {sorted(options)}")
        self.split = split
        self._restart(np.arange(self.num_envs))
        self._autoreset[:] = False
        return self._observe(), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        acts = np.asarray(actions)
        if acts.shape != (self.num_envs,) or not np.issubdtype(acts.dtype, np.integer):
            raise ValueError(f"expected {self.num_envs} integer acts (shape ({self.num_envs},)), got {acts!r}")
        if ((acts < 0) | (acts >= self.single_action_space.n)).any():
            raise ValueError(f"persuader acts are 0..{self.single_action_space.n - 1}, got {acts.tolist()}")
        restarting = np.flatnonzero(self._autoreset)
        playing = np.flatnonzero(~self._autoreset)
        self._restart(restarting)
        self.batch.step_agent(playing, acts[playing])
        waiting = playing[self.batch.awaiting_user[playing]]
        if len(waiting):
            features, allowed = self.batch.user_features(waiting)
            replies, _ = self.simulator.act(features, allowed, self.np_random)
            self.batch.step_user(waiting, np.asarray(replies))
        ended = np.zeros(self.num_envs, bool)
        ended[playing] = ~self.batch.live[playing]
        rewards = np.where(ended, self.batch.agent_reward(), 0.0)
        truncated = ended & (self.batch.end_reason == "max_turns")
        terminated = ended & ~truncated
        self._autoreset = ended
        return self._observe(), rewards, terminated, truncated, {}

    def action_masks(self) -> np.ndarray:
        """`[num_envs, acts]`: every persuader act is allowed at every turn."""
        return np.ones((self.num_envs, self.single_action_space.n), bool)

    def _restart(self, index: np.ndarray) -> None:
        if len(index) == 0:
            return
        numbers = self.np_random.integers(PERSONAS_PER_SPLIT[self.split], size=len(index))
        personas = np.array([self.template.persona(f"{self.split}-{number:05d}") for number in numbers])
        self.batch.restart(index, personas)

    def _observe(self) -> Any:
        features = self.batch.agent_features().astype(np.float32)
        if not self.mask_in_obs:
            return features
        return {"observation": features, "action_mask": self.action_masks().astype(np.int8)}
