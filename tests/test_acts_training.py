"""Training on the act-level testbed: categorical policies through the same trainer, crash points, the demo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from baselines.apps.demo import DEFAULT_METHODS, LABELS, DemoSettings, mean_interval, run_demo  # noqa: E402
from baselines.cli import main  # noqa: E402
from baselines.training.act_policy import ActPolicy, build_act_policy  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.portable import portable_environment  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402
from scope_envs.core.dialogue import AGENT, USER  # noqa: E402
from scope_envs.core.failpoints import ENV_VAR  # noqa: E402
from scope_envs.persuasion_acts import PersuasionActsEnv  # noqa: E402
from scope_envs.persuasion_acts.simulators import ActFamily  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ACTS = [
    "env=PersuasionActs",
    "policy=linear",
    "simulators=[family:0@3]",
    "eval_simulators=[family:100, family:101]",
    "groups_per_step=4",
    "group_size=4",
    "micro_batch=64",
    "lr=0.05",
    "eval_tasks=5",
    "tensorboard=false",
]
POPULATION = [
    *ACTS,
    "method=population",
    "simulator_policy=family:0@3",
    "simulator_kl_coef=0.1",
    "pool_every=1",
    "pool_size=1",  # more snapshots than the pool holds between two checkpoints
    "steps=4",
    "checkpoint_every=2",
    "eval_every=2",
    "keep_checkpoints=5",
]


def history(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "method", ["single", "ensemble", "vs", "cotrain", "population", "cotrain-cooperative", "cotrain-curriculum"]
)
def test_every_method_trains_a_categorical_policy_through_the_cli(tmp_path, method):
    extra = {
        "ensemble": ["method=ensemble", "simulators=[family:0@3, family:1@3]"],
        "vs": ["method=vs", "vs_k=3"],
        "cotrain": ["method=cotrain", "simulator_policy=family:0@3"],
        "population": ["method=population", "pool_every=2", "pool_size=2"],
        "cotrain-cooperative": ["method=cotrain", "simulator_reward=cooperative"],
        "cotrain-curriculum": ["method=cotrain", "simulator_reward=curriculum"],
    }.get(method, [])
    out = tmp_path / method
    assert main(["train", *ACTS, *extra, "steps=4", "eval_every=2", f"output_dir={out}"]) == 0
    records = history(out)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(0.0 < r["entropy"] <= np.log(14) + 1e-6 for r in records)
    assert {"heldout_success/family:100", "heldout_success/family:101"} <= set(records[-1])
    if method.startswith("cotrain") or method == "population":
        # the live simulator trains on the groups it plays (in a population, some steps it plays none)
        assert (all if method != "population" else any)("simulator/entropy" in r for r in records)
    if method == "population":
        assert records[-1]["pool/size"] == 2 and any(k.startswith("pool/agent_reward/snapshot@") for k in records[-1])
    assert (out / "curves.png").is_file()


def test_rollout_logprobs_are_the_training_logprobs(tmp_path):
    config = load_config(None, [*ACTS, "method=cotrain", "simulator_policy=family:0@3", f"output_dir={tmp_path}"])
    trainer = Trainer(config)
    for learner in trainer.learners.values():  # move away from the (uniform or family) initialisation
        with torch.no_grad():
            learner.policy.model.weight.add_(torch.randn_like(learner.policy.model.weight))
    players, _ = trainer.players(0, 3)
    episodes = trainer.collect(0, group_size=4, split="train", players=players)
    for side in (AGENT, USER):
        samples = [s for e in episodes for s in e.samples[side]]
        logprobs, mask, entropy = trainer.learners[side].policy.sequence_logprobs(samples)
        sampled = torch.tensor([s.logprobs[1:] + [0.0] * (mask.shape[1] + 1 - len(s.logprobs)) for s in samples])
        assert torch.allclose(logprobs * mask, sampled.float() * mask, atol=1e-5)
        assert (entropy[mask > 0] > 0).all()


def test_a_family_policy_starts_as_the_family():
    env = PersuasionActsEnv()
    policy = build_act_policy("family:3@2", env=env, side=USER, temperature=1.0)
    env.reset(seed=0)
    env.step({AGENT: 12})
    features, mask = env.batch.user_features()
    family = ActFamily(3, gamma=2.0)
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    many = np.repeat(features, 50, 0), np.repeat(mask, 50, 0)
    np.testing.assert_array_equal(policy.act(*many, rng_a)[0], family.act(*many, rng_b)[0])
    from scope_envs.p4g import P4GEnv

    with pytest.raises(ValueError, match="Discrete actions"):
        build_act_policy("linear", env=P4GEnv(persona_source="synthetic"), side=AGENT, temperature=1.0)
    with pytest.raises(ValueError, match="weights of shape"):
        build_act_policy("family:3@2", env=env, side=AGENT, temperature=1.0)
    assert isinstance(build_act_policy("linear", env=env, side=AGENT, temperature=1.0), ActPolicy)


def run_cli(args, **env):
    """`scope train` in the portable kernels: a run compared bit for bit with another needs them (without
    MKL_CBWR, MKL's results may depend on how a process happened to align its arrays)."""
    return subprocess.run(
        [sys.executable, "-m", "baselines.cli", "train", *args],
        cwd=ROOT,
        env=portable_environment({**os.environ, **env}),
        capture_output=True,
        text=True,
        timeout=600,
    )


def final_state(out):
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    weights = {p.parent.parent.name: torch.load(p, weights_only=True) for p in latest.glob("*/policy/policy.pt")}
    optimizers = {p.parent.name: torch.load(p, weights_only=True) for p in sorted(latest.glob("*/optimizer.pt"))}
    drop = {"step_time", "generated_tokens_per_s", "disk_mb"}
    metrics = [{k: v for k, v in r.items() if k not in drop} for r in history(out)]
    pool = json.loads((out / "sim_pool" / "pool.json").read_text())
    return weights, optimizers, metrics, [(m["step"]) for m in pool["members"]]


def test_a_run_killed_at_any_point_resumes_exactly(tmp_path):
    """SIGKILL mid-rollout, between the two models' updates, while a checkpoint is written and while
    the pool manifest is replaced: `--resume` ends with the same models, optimizers, metrics and pool."""
    whole = tmp_path / "whole"
    assert run_cli([*POPULATION, f"output_dir={whole}"]).returncode == 0
    expected = final_state(whole)
    for point in ("rollout@3", "update_agent@3", "checkpoint@4", "pool_manifest@3"):
        out = tmp_path / point.replace("@", "-")
        crashed = run_cli([*POPULATION, f"output_dir={out}"], **{ENV_VAR: point})
        assert crashed.returncode == -9, f"{point} did not fire: {crashed.stderr[-500:]}"
        resumed = run_cli([*POPULATION, f"output_dir={out}", "--resume"])
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        weights, optimizers, metrics, pool = final_state(out)
        assert weights.keys() == expected[0].keys()
        for side in weights:
            assert torch.equal(weights[side]["weight"], expected[0][side]["weight"]), point
            assert torch.equal(optimizers[side]["state"][0]["exp_avg"], expected[1][side]["state"][0]["exp_avg"]), point
        assert metrics == expected[2], point
        assert pool == expected[3], point
        assert not list((out / "checkpoints").glob(".step-*")), "a half-written checkpoint is cleaned up"


def test_a_shortened_demo_writes_the_report_and_plots(tmp_path):
    settings = DemoSettings(
        steps=4, seeds=2, groups=4, group_size=4, eval_every=2, eval_tasks=10, eval_samples=1, out=str(tmp_path)
    )
    report = run_demo(settings, progress=False)
    text = report.read_text()
    for method in DEFAULT_METHODS:
        assert f"| {LABELS[method]}" in text
    assert (tmp_path / "curves.png").is_file() and "![curves](curves.png)" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["summary"]) == set(DEFAULT_METHODS)
    assert "## Manipulation checks" in text and "sharpening part" in text and "## Remedies" in text
    assert set(summary["verdicts"]) == {"vs", "population"}
    assert summary["fidelity"]["vs_to_unsharpened"] >= 0 and summary["fidelity"]["pool_diversity"] >= 0
    if not summary["checks"]["confirmed"]:  # two seeds of four steps: no remedy result may be called
        assert {v["verdict"] for v in summary["verdicts"].values()} == {"not testable here"}
    trained = [p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith("untrained")]
    assert len(trained) == 2 * len(DEFAULT_METHODS) and "| untrained (uniform over acts) |" in text


def test_demo_help_lists_the_knobs(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    for knob in ("--gamma", "--k", "--pool-size", "--seeds", "--steps", "--methods", "--spread"):
        assert knob in text


def test_mean_interval_is_the_t_interval():
    mean, half = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 * 1.0 / np.sqrt(3))


def test_throughput_benchmark_runs():
    result = subprocess.run(
        [sys.executable, "benchmarks/acts_throughput.py", "--episodes", "512", "--anchor-episodes", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("agent turns/s") == 2 and "ratio" in result.stdout


def test_the_persuadee_side_trains_against_the_scripted_persuader(tmp_path):
    overrides = [*ACTS, "side=user", "simulators=[scripted]", "eval_simulators=[scripted]", "steps=2"]
    assert main(["train", *overrides, f"output_dir={tmp_path}"]) == 0
    assert all(r["trained_tokens"] > 0 for r in history(tmp_path))
    bad = load_config(
        None, [*ACTS, "simulators=[scripted:scope_envs.p4g.scripted:ScriptedPersuadee]", f"output_dir={tmp_path / 'x'}"]
    )
    with pytest.raises(TypeError, match="cannot play an act-level env"):
        Trainer(bad).train_step(0)


def test_a_fresh_run_into_an_old_output_dir_equals_one_into_a_new_dir(tmp_path):
    """The earlier run's pool (whose initial simulator was evicted and deleted) is not carried over."""
    settings = [s for s in POPULATION if not s.startswith("checkpoint_every")] + ["checkpoint_every=4"]
    drop = {"step_time", "generated_tokens_per_s", "disk_mb"}

    def run(out):
        assert main(["train", *settings, f"output_dir={out}"]) == 0
        return [{k: v for k, v in r.items() if k not in drop} for r in history(out)]

    fresh = run(tmp_path / "fresh")
    run(tmp_path / "reused")
    assert run(tmp_path / "reused") == fresh


def test_the_report_gives_the_checks_before_any_verdict():
    from baselines.apps.demo import Fidelity, check_lines, verdict_lines
    from baselines.apps.verdicts import manipulation_checks, remedy_verdicts

    base = [0.40, 0.42, 0.38, 0.41, 0.39]
    clear = {
        "single": base,
        "heldout": [v + 0.2 + 0.002 * i for i, v in enumerate(base)],
        "unsharpened": [v + 0.12 + 0.001 * i for i, v in enumerate(base)],
        "vs": [v + 0.1 + 0.003 * i for i, v in enumerate(base)],
        "population": [v + 0.05 + 0.004 * i for i, v in enumerate(base)],
    }
    checks = manipulation_checks(clear)
    assert checks.confirmed and checks.gap.difference == pytest.approx(0.204)
    text = "\n".join(check_lines(checks, Fidelity(pool_diversity=0.2), 5))
    assert "sharpening part" in text and "family part" in text and "G / 2 = **0.102**" in text
    assert "pool members differ by 0.200" in text
    verdicts = {v.remedy: v for v in remedy_verdicts(clear, ("vs", "population"), checks)}
    assert verdicts["vs"].verdict == "helps"
    assert verdicts["population"].verdict == "not testable here", "its ceiling (diverse) was not run"
    text = "\n".join(verdict_lines(checks, list(verdicts.values())))
    assert "| Verbalized Sampling | +0.106" in text and "helps" in text
    faint = {**clear, "heldout": [v + (0.01 if i % 2 else -0.008) for i, v in enumerate(base)]}
    checks = manipulation_checks(faint)
    assert not checks.confirmed
    assert {v.verdict for v in remedy_verdicts(faint, ("vs", "population"), checks)} == {"not testable here"}
    assert "no remedy result is called" in "\n".join(check_lines(manipulation_checks({}), Fidelity(), 0))


def test_a_study_file_sets_the_demos_gamma_and_spread_and_the_command_line_overrides_them():
    import argparse

    from baselines.apps.demo import add_arguments, settings_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    mechanism = settings_from(parser.parse_args(["--study", "mechanism"]))
    assert (mechanism.gamma, mechanism.spread) == (10, 0.25)
    assert settings_from(parser.parse_args(["--study", "mechanism", "--spread", "0.5"])).spread == 0.5
    assert (settings_from(parser.parse_args([])).gamma, settings_from(parser.parse_args([])).spread) == (3.0, 1.0)


def test_eval_every_0_means_no_evaluation_and_zero_periods_are_refused(tmp_path):
    """`eval_every=0` crashed the trainer with a ZeroDivisionError after the first step."""
    history_of_run = Trainer(load_config(None, [*ACTS, "steps=2", "eval_every=0", f"output_dir={tmp_path}"])).run(
        progress=False, overwrite=True
    )
    assert len(history_of_run) == 2 and not any(key.startswith("heldout") for r in history_of_run for key in r)
    for key in ("checkpoint_every", "pool_every"):
        with pytest.raises(ValueError, match=f"{key} must be at least 1"):
            load_config(None, [*ACTS, f"{key}=0"])
    with pytest.raises(ValueError, match="eval_every must be 0"):
        load_config(None, [*ACTS, "eval_every=-1"])
