"""What a rollout returns: one `Episode` per conversation, with each trained side's samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from baselines.traces import Sample


@dataclass
class Episode:
    group: int
    scenario_id: str
    rewards: dict[str, float]
    success: bool
    end_reason: str
    turns: int
    samples: dict[str, list[Sample]]
    generated_tokens: int
    tool_errors: dict[str, int]


def derive_seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] % (2**31 - 1))


def is_success(reward: float, reward_info: dict[str, Any]) -> bool:
    components = reward_info.get("components", {})
    return bool(components["success"] > 0) if "success" in components else reward >= 1.0 - 1e-9


def tool_errors(messages: list[dict[str, Any]]) -> int:
    return sum(m["role"] == "tool" and str(m.get("content") or "").startswith("Error") for m in messages)
