"""`ThreadVectorEnv`: Gymnasium's `SyncVectorEnv` with sub-environments stepped on a thread pool.

Dialogue views spend their time waiting on the partner policy (an HTTP API, a model server),
which releases the GIL, so threads overlap that waiting without copying text between processes.
Gymnasium's process-based `AsyncVectorEnv` is the wrong tool here: with its default
`shared_memory=True` a text observation is written into a fixed buffer of charset indices, and
the first character outside the space's sample charset (a bracket, a digit, any non-English
letter) raises `KeyError` in the worker; with `shared_memory=False` it
works, but pickles every observation and cannot share one policy object (or its connection pool)
between sub-environments. Use this class, or `DialogueBatch` to batch generation yourself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, iterate


class ThreadVectorEnv(SyncVectorEnv):
    """Same semantics (autoreset modes, info batching) as `SyncVectorEnv`; calls run concurrently."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env]],
        *,
        max_workers: int | None = None,
        copy: bool = True,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    ) -> None:
        super().__init__(env_fns, copy=copy, autoreset_mode=autoreset_mode)
        self._pool = ThreadPoolExecutor(max_workers=max_workers or len(self.envs), thread_name_prefix="scope-env")

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        seeds = self._seeds(seed)
        options = dict(options) if options is not None else None
        mask = options.pop("reset_mask", None) if options is not None else None
        if mask is None:
            mask = np.ones(self.num_envs, dtype=np.bool_)
        elif not (
            isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (self.num_envs,) and mask.any()
        ):
            raise ValueError(
                f"options['reset_mask'] must be a bool array of shape ({self.num_envs},) with a True value"
            )
        indices = [i for i in range(self.num_envs) if mask[i]]
        results = list(self._pool.map(lambda i: self.envs[i].reset(seed=seeds[i], options=options), indices))
        infos: dict[str, Any] = {}
        for i, (obs, info) in zip(indices, results, strict=True):
            self._env_obs[i] = obs
            self._terminations[i] = self._truncations[i] = self._autoreset_envs[i] = False
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return (deepcopy(self._observations) if self.copy else self._observations), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        action_list = list(iterate(self.action_space, actions))
        if len(action_list) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(action_list)}")
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset_envs.any():
            raise RuntimeError(
                "autoreset is disabled but sub-environments "
                f"{np.flatnonzero(self._autoreset_envs).tolist()} need a reset"
            )
        results = list(self._pool.map(self._step_one, range(self.num_envs), action_list))
        infos: dict[str, Any] = {}
        for i, (obs, reward, terminated, truncated, info, final) in enumerate(results):
            self._env_obs[i] = obs
            self._rewards[i], self._terminations[i], self._truncations[i] = reward, terminated, truncated
            if final is not None:
                infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        observations = deepcopy(self._observations) if self.copy else self._observations
        return observations, np.copy(self._rewards), np.copy(self._terminations), np.copy(self._truncations), infos

    def _step_one(
        self, i: int, action: Any
    ) -> tuple[Any, float, bool, bool, dict[str, Any], tuple[Any, dict[str, Any]] | None]:
        env = self.envs[i]
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
            obs, info = env.reset()
            return obs, 0.0, False, False, info, None
        obs, reward, terminated, truncated, info = env.step(action)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and (terminated or truncated):
            final = (obs, info)
            obs, info = env.reset()
            return obs, reward, terminated, truncated, info, final
        return obs, reward, terminated, truncated, info, None

    def _seeds(self, seed: int | list[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int):
            return [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} seeds, got {len(seed)}")
        return list(seed)

    def close_extras(self, **kwargs: Any) -> None:
        if hasattr(self, "_pool"):
            self._pool.shutdown(wait=True)
        super().close_extras(**kwargs)
