"""The remedy study's design: the runs it plans, and the power analysis that fixes its seeds."""

import json

import numpy as np
import pytest

pytest.importorskip("scipy")

from baselines.apps import remedy_study
from baselines.apps.verdicts import CHECK_ARMS, power_of_paired_t


def write_finals(out, shifts, seeds, sd=0.03):
    rng = np.random.default_rng(0)
    for testbed in remedy_study.testbeds():
        base = 0.5 + sd * rng.standard_normal(len(seeds))
        for arm, shift in shifts.items():
            noise = 0.01 * rng.standard_normal(len(seeds))
            for seed, value in zip(seeds, base + shift + noise):
                folder = out / testbed.name / "runs" / f"{arm}-seed{seed}"
                folder.mkdir(parents=True)
                (folder / "final.json").write_text(json.dumps({"heldout_success": float(value)}))


def test_every_testbed_arm_and_seed_is_planned_once_with_its_own_study(tmp_path):
    seeds = {"v1": (0, 1), "mechanism": (0, 1, 2)}
    todo = remedy_study.plan_runs(tmp_path, remedy_study.ARMS, seeds)
    assert len(todo) == len(remedy_study.ARMS) * 5
    envs = {c["output_dir"].split("/")[-3]: c["env"] for c in todo}
    assert envs == {"v1": "PersuasionActs-v1", "mechanism": "PersuasionActsPlanted"}
    vs = [c for c in todo if c["output_dir"].endswith("/vs_prob-seed0")]
    assert {c["vs_draw"] for c in vs} == {"prob"} and all(c["eval_tasks"] * c["eval_samples"] == 4000 for c in vs)
    population = next(c for c in todo if c["output_dir"].endswith("v1/runs/population-seed1"))
    assert population["simulator_reward"] == "curriculum" and population["pool_draw"] == "batch"
    assert population["simulator_policy"] != population["simulators"][0], "it starts from another family"


def test_the_power_analysis_asks_for_the_seeds_that_reach_80_percent_at_the_smallest_effect(tmp_path):
    write_finals(tmp_path, {"single": 0.0, "heldout": 0.1, "unsharpened": 0.06, "diverse": 0.08}, range(100, 110))
    table = remedy_study.plan(tmp_path)
    family = len(remedy_study.testbeds()) * len(remedy_study.REMEDIES)
    for row in table.values():
        assert row["sesoi"] == pytest.approx(row["checks"]["positive_control"]["difference"] / 2)
        n, sd = row["seeds"], row["planning_sd"]
        assert power_of_paired_t(row["sesoi"], sd, n, alpha=0.05 / family) >= 0.8
        assert power_of_paired_t(row["sesoi"], sd, n - 1, alpha=0.05 / family) < 0.8
    assert set(CHECK_ARMS) == {"single", "heldout", "unsharpened", "diverse"}
