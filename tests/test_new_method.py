"""A new training method, written whole in this one module: no file of the library is edited to
add it. `HardestFirst` trains the agent against a panel of fixed simulators, every group of a step
against the one the agent did worst against in the step before (the agent's rewards per simulator
are what `after_step` reads); the test trains it two steps through `scope train`, naming the
method by `module:Class` in the config, as any user's method is named."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from baselines.training.methods import Method, method_class
from scope_envs.core.specs import make_policy

pytest.importorskip("torch")


class HardestOpponent:
    """`sims.opponents`' protocol: `pick(step, group) -> (label, policy)`."""

    def __init__(self, panel: list[Any]) -> None:
        self.panel = panel
        self.current = 0

    def pick(self, step: int, group: int) -> tuple[str, Any]:
        return f"simulator{self.current}", self.panel[self.current]


class HardestFirst(Method):
    def problems(self) -> list[str]:
        return [] if len(self.config.simulators) > 1 else ["method HardestFirst needs a panel of simulators"]

    def opponents(self, trainer: Any) -> HardestOpponent:
        panel = [make_policy(spec, env=trainer.probe, side=self.partner_side) for spec in self.config.simulators]
        self.opponent = HardestOpponent(panel)
        self.seen: dict[int, list[float]] = {}
        return self.opponent

    def step_metrics(self, trainer: Any, step: int, labels: list[str], episodes: list[Any]) -> dict[str, float]:
        rewards = [e.rewards[self.side] for e in episodes]
        self.seen.setdefault(self.opponent.current, []).extend(rewards)
        return {"hardest/simulator": float(self.opponent.current), "hardest/reward": float(np.mean(rewards))}

    def after_step(self, trainer: Any, step: int) -> None:
        # the panel member not yet played, else the one with the lowest mean reward so far
        unplayed = [i for i in range(len(self.opponent.panel)) if i not in self.seen]
        self.opponent.current = unplayed[0] if unplayed else min(self.seen, key=lambda i: np.mean(self.seen[i]))


def test_a_method_of_ones_own_trains_two_steps_through_scope_train(tmp_path, capsys):
    from baselines.cli import main

    out = tmp_path / "run"
    settings = ["env=P4G", "policy=tiny", "steps=2", "groups_per_step=2", "group_size=2", "max_new_tokens=6"]
    settings += ["env_kwargs={persona_source: synthetic, exchanges: 1}", "eval_every=2", "eval_tasks=1"]
    settings += ["simulators=[scripted, 'scripted:training_helpers:ParityPersuadee']", "tensorboard=false"]
    settings += [f"method={__name__}:HardestFirst", f"output_dir={out}"]
    assert main(["train", *settings]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert [r["hardest/simulator"] for r in records] == [0.0, 1.0]  # step 2 plays the panel member not yet played
    assert (out / "checkpoints" / "latest").read_text() == "step-000002"


def test_its_checks_are_the_configs():
    from baselines.training.config import load_config

    with pytest.raises(ValueError, match="needs a panel of simulators"):
        load_config(None, ["env=P4G", f"method={__name__}:HardestFirst"])


def test_an_unknown_method_names_the_choices():
    from baselines.training.config import load_config

    with pytest.raises(ValueError, match=r"method must be one of .*'population'"):
        load_config(None, ["env=P4G", "method=populaton"])
    with pytest.raises(ValueError, match=r"not a subclass of baselines\.training\.methods\.Method"):
        method_class(f"{__name__}:HardestOpponent")
