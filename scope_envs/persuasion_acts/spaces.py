"""The observation options of the act-level testbed, shared by its env and its vector env.

`obs="features"` is a `Box` (what `PPO("MlpPolicy", ...)` and other array code take as is),
`obs="text"` the side's view as text (for language-model agents), `obs="both"` a `Dict` of the two.
`action_mask=True` puts the allowed acts into the observation the way PettingZoo's classic envs,
RLlib and TorchRL expect it: `{"observation": ..., "action_mask": ...}` (or an `action_mask` entry
beside `features` and `text` with `obs="both"`). The side that is not to speak gets a mask of all
ones: any act is accepted and ignored, so libraries that sample every agent at every step never
meet an empty mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from scope_envs.core.spaces import UnicodeText
from scope_envs.persuasion_acts.model import PERSONA_LIMIT

OBS_MODES = ("features", "text", "both")
INFO_MODES = ("full", "lean")


def check_options(obs: str, info: str) -> None:
    if obs not in OBS_MODES:
        raise ValueError(f"obs must be one of {OBS_MODES}, got {obs!r}")
    if info not in INFO_MODES:
        raise ValueError(f"info must be one of {INFO_MODES}, got {info!r}")


def observation_space(width: int, n_acts: int, obs: str, action_mask: bool) -> spaces.Space:
    """The space of one side's observation: `width` features, `n_acts` acts."""
    parts: dict[str, spaces.Space] = {
        "features": spaces.Box(-PERSONA_LIMIT, PERSONA_LIMIT, (width,), np.float32),
        "text": UnicodeText(),
    }
    base = spaces.Dict(parts) if obs == "both" else parts[obs]
    if not action_mask:
        return base
    mask = spaces.Box(0, 1, (n_acts,), np.int8)
    if obs == "both":
        return spaces.Dict({**parts, "action_mask": mask})
    return spaces.Dict({"observation": base, "action_mask": mask})


def assemble(features: np.ndarray, text: str | None, mask: np.ndarray | None, obs: str) -> Any:
    """One side's observation from its parts (`mask` None: no mask in the observation)."""
    parts = {"features": np.asarray(features, np.float32), "text": text}
    base = parts if obs == "both" else parts[obs]
    if mask is None:
        return base
    mask = np.asarray(mask, np.int8)
    return {**parts, "action_mask": mask} if obs == "both" else {"observation": base, "action_mask": mask}
